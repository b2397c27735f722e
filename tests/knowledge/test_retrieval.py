"""Retrieval options and the vector index: sqlite-vec (SQLite file) or brute force (reported), metadata
filters, reciprocal-rank fusion, MMR, de-duplication, LangChain both ways, and recall@k / MRR."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LangChainDocument
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from typer.testing import CliRunner

from convengine import ConfigError, Engine
from convengine.catalog.errors import InvalidInputError
from convengine.cli.app import app
from convengine.knowledge import HashingEmbeddings, Knowledge, KnowledgeRetriever, SearchSettings

ROOT = Path(__file__).parents[2]
FAQ_PACK = yaml.safe_load((ROOT / "examples" / "faq_assistant.yaml").read_text())
TOPICS = ["shipping parcels abroad", "refunds for returned items", "opening hours of the shop",
          "paying by card or invoice", "gift cards and vouchers", "damaged parcels and replacements"]


def fill(knowledge: Knowledge, kb: str = "shop", count: int = 30) -> None:
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        knowledge.add_text(kb, f"doc{i:02d}.md", f"Note {i} about {topic}: case{i} handled by team{i % 4}.",
                           metadata={"lang": "en" if i % 2 else "fr", "year": 2020 + i % 3, "public": i % 3 == 0})


def ranked(knowledge: Knowledge, query: str, **options: Any) -> list[tuple[str, float | None]]:
    return [(h.source, h.vector) for h in knowledge.search("shop", query, k=8, **options)]


def test_a_file_database_gets_the_sqlite_vec_index_and_finds_what_brute_force_finds(db_url: str) -> None:
    indexed = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    brute = Knowledge.open(db_url, embeddings=HashingEmbeddings(), settings=SearchSettings(vector_index="brute-force"))
    try:
        fill(indexed)
        if db_url.startswith("sqlite"):
            assert indexed.vector_index.kind == "sqlite-vec"
        else:  # the server here has no pgvector: brute force, and the reason says so
            assert indexed.vector_index.kind == "brute-force"
            assert "pgvector" in indexed.vector_index.reason
        assert brute.vector_index.kind == "brute-force"
        for query in ("refunds for returned items", "team3 gift vouchers", "case17"):
            a, b = ranked(indexed, query), ranked(brute, query)
            assert [s for s, _ in a] == [s for s, _ in b]
            assert [v for _, v in a] == pytest.approx([v for _, v in b], abs=1e-5)
            assert all(v is not None for _, v in a)
    finally:
        indexed.close()
        brute.close()


def test_the_index_follows_replaced_deleted_and_recreated_documents(db_url: str) -> None:
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        fill(knowledge, count=6)
        assert knowledge.search("shop", "damaged parcels replacements", k=1)[0].source == "doc05.md"
        # the last document replaced: SQLite gives its passage the chunk id the old one had
        knowledge.add_text("shop", "doc05.md", "Penguins waddle across the frozen harbour at dawn.")
        [hit] = knowledge.search("shop", "penguins waddle harbour", k=1)
        assert (hit.source, hit.text) == ("doc05.md", "Penguins waddle across the frozen harbour at dawn.")
        assert hit.vector is not None and hit.vector > 0.5
        assert all("damaged" not in h.text for h in knowledge.search("shop", "damaged parcels replacements"))
        knowledge.delete("shop")
        knowledge.add_text("shop", "other.md", "Volcanoes erupt molten lava and ash.")
        assert [h.source for h in knowledge.search("shop", "penguins waddle harbour lava")] == ["other.md"]
    finally:
        knowledge.close()


def test_a_new_process_finds_the_index_built_and_holds_no_vectors(tmp_path: Path, sqlite_db_url: str) -> None:
    first = Knowledge.open(sqlite_db_url, embeddings=HashingEmbeddings())
    fill(first)
    first.search("shop", "gift cards")
    first.close()
    second = Knowledge.open(sqlite_db_url, embeddings=HashingEmbeddings())
    try:
        assert second.search("shop", "gift cards and vouchers", k=1)[0].text.endswith("gift cards and vouchers: "
                                                                                      "case4 handled by team0.")
        index = second.retriever.index(second.engine.connect())
        assert not any(hasattr(value, "shape") for value in vars(index).values())  # no matrix in this process
        engine = sa.create_engine(sqlite_db_url)
        with engine.connect() as conn:  # built once, by the first process, at the base's current stamp
            assert conn.execute(sa.text("SELECT count(*) FROM ce_knowledge_vec_state")).scalar_one() == 1
        engine.dispose()
    finally:
        second.close()


def test_asking_for_sqlite_vec_where_it_cannot_run_is_refused_with_the_reason(db_url: str, tmp_path: Path) -> None:
    url = db_url if db_url.startswith("postgresql") else "sqlite://"
    knowledge = Knowledge(sa.create_engine(url), embeddings=HashingEmbeddings(),
                          settings=SearchSettings(vector_index="sqlite-vec"))
    with pytest.raises(ConfigError, match="knowledge.vector_index is sqlite-vec but (this PostgreSQL server has no "
                                          "pgvector|an in-memory SQLite database)"):
        _ = knowledge.vector_index
    knowledge.engine.dispose()


def test_metadata_filters_narrow_both_legs(db_url: str) -> None:
    for embeddings in (None, HashingEmbeddings()):
        knowledge = Knowledge.open(db_url, embeddings=embeddings)
        try:
            fill(knowledge)
            hits = knowledge.search("shop", "refunds returned items", k=20, filters={"lang": "en"})
            assert hits and all(h.metadata["lang"] == "en" for h in hits)
            years = knowledge.search("shop", "note about", k=30, filters={"year": [2020, 2022], "lang": "fr"})
            assert years and {(h.metadata["year"], h.metadata["lang"]) for h in years} <= {(2020, "fr"), (2022, "fr")}
            public = knowledge.search("shop", "note about", k=30, filters={"public": True})
            assert sorted(h.source for h in public) == [f"doc{i:02d}.md" for i in range(0, 30, 3)]
            assert knowledge.search("shop", "refunds", filters={"lang": "de"}) == []
            with pytest.raises(InvalidInputError, match="metadata filter 'lang': dict values cannot be matched"):
                knowledge.search("shop", "refunds", filters={"lang": {"$ne": "en"}})
            with pytest.raises(InvalidInputError, match="metadata filter 'a\"b'"):
                knowledge.search("shop", "refunds", filters={'a"b': "x"})
        finally:
            knowledge.delete("shop")
            knowledge.close()


def test_reciprocal_rank_fusion_orders_by_ranks_and_keeps_the_absolute_score(db_url: str) -> None:
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        fill(knowledge)
        weighted = {h.chunk_id: h for h in knowledge.search("shop", "paying invoice team2", k=10)}
        fused = knowledge.search("shop", "paying invoice team2", k=10, fusion="rrf")
        assert [h.fused for h in fused] == sorted((h.fused for h in fused), reverse=True)
        for hit in fused:
            expected = sum(1 / (60 + r) for r in (hit.lexical_rank, hit.vector_rank) if r)
            assert hit.fused == pytest.approx(expected, abs=1e-6)
            if hit.chunk_id in weighted:
                assert hit.score == weighted[hit.chunk_id].score
        assert all(h.fused is None for h in weighted.values())
        with pytest.raises(InvalidInputError, match="fusion must be weighted or rrf"):
            knowledge.search("shop", "x", fusion="max")  # type: ignore[arg-type]
    finally:
        knowledge.close()


def test_duplicates_are_dropped_and_mmr_diversifies(db_url: str) -> None:
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        same = "Express parcels arrive in two days and cost 9.90 EUR."
        knowledge.add_text("shop", "a.md", same)
        knowledge.add_text("shop", "copy/a.md", same.upper().replace(" ", "  "))
        knowledge.add_text("shop", "b.md", "Express parcels arrive in two days and cost 9.90 EUR in France.")
        knowledge.add_text("shop", "c.md", "Parcels sent abroad take a week; express is not offered there.")
        query = "how fast do express parcels arrive"
        assert [h.source for h in knowledge.search("shop", query, k=4, dedupe=False)][:2] == ["a.md", "copy/a.md"]
        plain = [h.source for h in knowledge.search("shop", query, k=2)]
        assert plain == ["a.md", "b.md"]  # the copy is gone
        diverse = [h.source for h in knowledge.search("shop", query, k=2, mmr=0.3)]
        assert diverse == ["a.md", "c.md"]  # b.md says what a.md says
        assert [h.source for h in knowledge.search("shop", query, k=2, mmr=1.0)] == plain
        with pytest.raises(InvalidInputError, match="mmr must be between 0 and 1"):
            knowledge.search("shop", query, mmr=1.5)
    finally:
        knowledge.close()


def test_a_chain_retrieves_convengine_passages_as_langchain_documents(db_url: str) -> None:
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        fill(knowledge)
        retriever = KnowledgeRetriever(knowledge=knowledge, knowledge_bases=["shop"], k=3,
                                       filters={"lang": "en"}, min_score=0.1)
        chain = retriever | RunnableLambda(lambda docs: [(d.metadata["source"], d.metadata["lang"]) for d in docs])
        found = chain.invoke("gift cards and vouchers")
        assert len(found) == 3 and all(lang == "en" for _, lang in found)
        [best, *_] = retriever.invoke("refunds for returned items team1")
        assert isinstance(best, LangChainDocument) and "refunds for returned items" in best.page_content
        assert {"score", "lexical", "vector", "kb_name", "source", "chunk_id"} <= set(best.metadata)
    finally:
        knowledge.close()


async def test_the_retriever_runs_in_async_chains(db_url: str) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        fill(knowledge, count=6)
        docs = await KnowledgeRetriever(knowledge=knowledge, k=2).ainvoke("opening hours of the shop")
        assert docs[0].metadata["source"] == "doc02.md"
    finally:
        knowledge.close()


class KeywordRetriever(BaseRetriever):
    """A host's own retriever: documents containing the query's first word, with a score."""

    texts: list[str]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[LangChainDocument]:
        word = query.split()[0].lower()
        return [LangChainDocument(t, metadata={"source": f"kw{i}", "relevance_score": 0.9})
                for i, t in enumerate(self.texts) if word in t.lower()]


def test_langchain_retrievers_and_vector_stores_are_searched_as_knowledge_bases(db_url: str) -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents([LangChainDocument("Gift cards never expire and can be used online.",
                                           metadata={"source": "gift.md", "lang": "en"}),
                         LangChainDocument("Les cartes cadeaux n'expirent jamais.", metadata={"source": "gift-fr.md",
                                                                                               "lang": "fr"})])
    keyword = KeywordRetriever(texts=["Invoices are sent by email within a day.", "Nothing here."])
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings(),
                               knowledge_bases={"wiki": store, "kw": keyword})
    try:
        fill(knowledge)
        [hit] = knowledge.search("wiki", "do gift cards expire", k=1)
        assert (hit.kb_name, hit.source, hit.chunk_id < 0) == ("wiki", "gift.md", True)
        assert hit.vector is not None and hit.lexical == 1.0
        assert [h.source for h in knowledge.search("wiki", "gift cards", filters={"lang": "fr"})] == ["gift-fr.md"]
        [kw] = knowledge.search("kw", "invoices by email", k=3)
        assert (kw.source, kw.vector) == ("kw0", 0.9)
        mixed = {h.kb_name for h in knowledge.search(["shop", "wiki"], "gift cards vouchers", k=10)}
        assert mixed == {"shop", "wiki"}
        assert {h.kb_name for h in knowledge.search(None, "invoices gift", k=40)} == {"shop", "wiki", "kw"}
    finally:
        knowledge.close()
    with pytest.raises(InvalidInputError, match="'bad': dict is neither a LangChain BaseRetriever nor a VectorStore"):
        Knowledge.open(db_url, knowledge_bases={"bad": {}})


def test_the_fallback_answers_from_a_registered_vector_store(db_url: str) -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents([LangChainDocument("Gift cards never expire and can be used online.",
                                           metadata={"source": "gift.md"})])
    engine = Engine.open(db_url, pack=copy.deepcopy(FAQ_PACK), embeddings=HashingEmbeddings(),
                         knowledge_bases={"faq": store})
    try:
        answer = engine.process("do gift cards expire?")
        assert answer.text == "Gift cards never expire and can be used online."
        assert answer.payload.sources[0]["source"] == "gift.md"
        unknown = engine.process("what is the capital of peru")
        assert unknown.text.startswith("Sorry, I don't know that one")
    finally:
        engine.close()


QUESTIONS = [
    {"question": "refunds for returned items", "expected": ["doc01.md", "doc07.md"]},
    {"question": "case17 handled", "expected": "doc17.md"},
    {"question": "zebra crossing lights", "expected": ["doc03.md"]},
]


def test_recall_at_k_and_mrr_on_labelled_questions(db_url: str, tmp_path: Path) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        fill(knowledge)
        path = tmp_path / "questions.yaml"
        path.write_text(yaml.safe_dump({"questions": QUESTIONS}))
        report = knowledge.evaluate("shop", path, k=5)
        by_question = {r.question: r for r in report.results}
        refunds = by_question["refunds for returned items"]
        expected_recall = len({"doc01.md", "doc07.md"} & set(refunds.retrieved)) / 2
        assert refunds.recall == expected_recall > 0 and len(refunds.retrieved) == 5
        first = next(i for i, s in enumerate(refunds.retrieved, 1) if s in {"doc01.md", "doc07.md"})
        assert refunds.reciprocal_rank == 1 / first
        assert (by_question["case17 handled"].recall, by_question["case17 handled"].reciprocal_rank) == (1.0, 1.0)
        assert (by_question["zebra crossing lights"].recall, by_question["zebra crossing lights"].reciprocal_rank) \
            == (0.0, 0.0)
        assert report.recall_at_k == pytest.approx((expected_recall + 1.0) / 3)
        assert report.mrr == pytest.approx((1 / first + 1.0) / 3)
        jsonl = tmp_path / "questions.jsonl"
        jsonl.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n")
        assert knowledge.evaluate("shop", jsonl, k=5) == report
    finally:
        knowledge.close()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("q.yaml", "- question: hi\n", r"q.yaml entry 1: 'expected' must be a document id"),
    ("q.yaml", "- {question: '', expected: a}\n", r"q.yaml entry 1: needs a non-empty 'question'"),
    ("q.yaml", "question: hi\n", r"q.yaml: expected a list of questions"),
    ("q.jsonl", '{"question": "a", "expected": ["x"]}\n{oops\n', r"q.jsonl:2: not JSON"),
    ("q.jsonl", "\n", r"q.jsonl: holds no question"),
])
def test_a_bad_question_file_is_refused_naming_the_entry(tmp_path: Path, name: str, content: str,
                                                          message: str) -> None:
    from convengine.knowledge import load_questions

    (tmp_path / name).write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        load_questions(tmp_path / name)


def test_the_cli_prints_recall_mrr_the_misses_and_the_index(db_url: str, tmp_path: Path) -> None:
    knowledge = Knowledge.open(db_url)
    fill(knowledge)
    knowledge.close()
    path = tmp_path / "questions.yaml"
    path.write_text(yaml.safe_dump(QUESTIONS))
    runner = CliRunner()
    result = runner.invoke(app, ["knowledge", "eval", "shop", str(path), "--url", db_url, "-k", "3"])
    assert result.exit_code == 0, result.output
    assert "3 questions, recall@3" in result.output and "MRR" in result.output
    assert "zebra crossing lights" in result.output and "case17 handled" not in result.output  # misses only
    listed = runner.invoke(app, ["knowledge", "list", "--url", db_url])
    assert "vector index: " in listed.output
    assert ("sqlite-vec" if db_url.startswith("sqlite") else "no pgvector extension") in listed.output
    search = ["knowledge", "search", "shop", "refunds returned", "--url", db_url, "--fusion", "rrf", "--where"]
    english, french = runner.invoke(app, [*search, "lang=en"]), runner.invoke(app, [*search, "lang=fr"])
    assert english.exit_code == french.exit_code == 0
    assert "doc07.md" in english.output and "doc07.md" not in french.output  # the refunds notes are in English
    bad = runner.invoke(app, ["knowledge", "search", "shop", "x", "--url", db_url, "--where", "lang"])
    assert bad.exit_code != 0 and "--where 'lang': use KEY=VALUE" in bad.output
