"""Knowledge answers people can trust (issue 30): the FAQ example answers its own questions, sources
reach HTTP clients, documents keep their identity, model changes are caught, text is cut and
decoded properly, and a follow-up keeps its topic."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from convengine import ConfigError, Engine
from convengine.api.app import create_app
from convengine.knowledge import Document, HashingEmbeddings, Knowledge
from convengine.settings import KnowledgeIngestSettings
from convengine.testing import run_file
from tests.servers import in_process

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
FAQ_PACK = yaml.safe_load((EXAMPLES / "faq_assistant.yaml").read_text())
FAQ_TESTS = EXAMPLES / "faq_assistant.conv.yaml"


@pytest.mark.parametrize("embeddings", ["none", "hashing"])
def test_the_faq_example_answers_natural_phrasings_and_falls_back_otherwise(
        db_url: str, tmp_path: Path, embeddings: str) -> None:
    spec = yaml.safe_load(FAQ_TESTS.read_text())
    spec.update(pack=str(EXAMPLES / spec["pack"]), knowledge={"faq": [str(EXAMPLES / "faq")]}, embeddings=embeddings)
    if embeddings == "hashing":  # the toy offline vectors may prefer another section of the right document
        for turn in (t for test in spec["tests"] for t in test["turns"]):
            payload = turn.get("expect", {}).get("payload") or {}
            if "source" in payload or "regex" in payload:
                turn["expect"]["payload"] = {"source": payload["source"]} if "source" in payload else {"type": "TEXT"}
    path = tmp_path / "faq.conv.yaml"
    path.write_text(yaml.safe_dump(spec))
    outcomes = run_file(path, url=db_url)
    assert len(outcomes) == len(spec["tests"]) >= 6
    assert [o.report() for o in outcomes if not o.passed] == []


def _faq_engine(url: str, pack: dict[str, Any] | None = None, **options: Any) -> Engine:
    engine = Engine.open(url, pack=pack or FAQ_PACK, **options)
    assert engine.knowledge.ingest("faq", [EXAMPLES / "faq"]).ok
    return engine


@pytest.mark.asyncio
async def test_http_clients_get_the_sources_of_a_knowledge_answer_and_nothing_new_otherwise(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=FAQ_PACK)
    try:
        await asyncio.to_thread(engine.knowledge.ingest, "faq", [EXAMPLES / "faq"])
        async with in_process(create_app(engine=engine)) as client:
            reply = (await client.post("/api/v1/conversation/message",
                                       json={"message": "how long does shipping take?"})).json()
            assert reply["success"] is True and "3 to 5 business days" in reply["payload"]["value"]
            [best, *_] = reply["payload"]["sources"]
            assert (best["kb"], best["source"], best["title"]) == ("faq", "shipping.md", "Shipping")
            assert best["score"] >= 0.5 and isinstance(best["position"], int)
            hello = (await client.post("/api/v1/conversation/message", json={"message": "hello"})).json()
            assert set(hello["payload"]) == {"type", "value"}  # ConvEngine's payload, unchanged
            schema = (await client.get("/openapi.json")).json()["components"]["schemas"]["PayloadBody"]
            assert schema["properties"]["sources"]["type"] == "array" and schema["required"] == ["type", "value"]
    finally:
        await engine.aclose()


def test_the_same_folder_by_another_path_is_the_same_documents(db_url: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "site" / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "returns.md").write_text("# Returns\n\nReturn any item within 30 days.\n")
    (docs / "guides" / "shipping.md").write_text("# Shipping\n\nParcels ship the same day.\n")
    knowledge = Knowledge.open(db_url)
    try:
        first = knowledge.ingest("faq", [docs.resolve()])
        assert sorted(first.added) == ["guides/shipping.md", "returns.md"]
        monkeypatch.chdir(tmp_path / "site")
        again = knowledge.ingest("faq", [Path("docs")], prune=True)
        assert (again.added, again.removed, sorted(again.unchanged)) == ([], [], ["guides/shipping.md", "returns.md"])
        monkeypatch.chdir(docs)
        assert knowledge.ingest("faq", [Path(".")]).added == []
        hits = knowledge.search("faq", "return an item", k=5)
        assert [h.source for h in hits] == ["returns.md"]  # once, not once per path
        [base] = knowledge.list()
        assert (base["documents"], base["chunks"]) == (2, 2)
        # a root names documents relative to it; a caller's own ids are stable too
        rooted = knowledge.ingest("site", [docs / "guides"], root=tmp_path / "site")
        assert rooted.added == ["docs/guides/shipping.md"]
        with pytest.raises(ConfigError, match="not inside the root"):
            knowledge.ingest("site", [tmp_path], root=docs)
        mine = Document("kb-article-17", "Gift cards never expire.", "Gift cards")
        assert knowledge.add_documents("gifts", [mine]).added == ["kb-article-17"]
        assert knowledge.add_documents("gifts", [mine]).unchanged == ["kb-article-17"]
    finally:
        knowledge.close()


def test_an_embeddings_model_change_is_refused_by_name_or_re_embeds_everything(db_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.md").write_text("# Returns\n\nReturn any item within 30 days.\n")
    old = Knowledge.open(db_url, embeddings=HashingEmbeddings(384))
    new = Knowledge.open(db_url, embeddings=HashingEmbeddings(256))
    plain = Knowledge.open(db_url)
    try:
        old.ingest("faq", [docs])
        old.add_text("faq", "gift-cards", "Gift cards never expire.")  # not under the folder: covered too
        with pytest.raises(ConfigError, match=r"embedded with HashingEmbeddings:hashing-384, not "
                                              r"HashingEmbeddings:hashing-256.*reembed=True"):
            new.ingest("faq", [docs])
        with pytest.raises(ConfigError, match="embedded with HashingEmbeddings:hashing-384, not no embeddings model"):
            plain.add_text("faq", "late.md", "Late parcels are refunded.")
        assert new.search("faq", "return an item")[0].vector is None  # nothing changed by the refusals
        report = new.ingest("faq", [docs], reembed=True)
        assert sorted(report.reembedded) == ["gift-cards", "returns.md"] and report.unchanged == ["returns.md"]
        assert "2 re-embedded" in str(report)
        assert all(h.vector is not None for h in new.search("faq", "gift cards expire", k=5))
        assert new.ingest("faq", [docs]).unchanged == ["returns.md"]  # the base now belongs to the new model
        with pytest.raises(ConfigError, match="hashing-256"):
            old.ingest("faq", [docs])
    finally:
        for k in (old, new, plain):
            k.close()


def test_passages_are_cut_at_word_and_sentence_boundaries_with_overlap(db_url: str, tmp_path: Path) -> None:
    sentences = [f"Sentence {i} mentions topic{i} and nothing else of note." for i in range(200)]
    (tmp_path / "long.txt").write_text("\n".join(sentences))  # hard-wrapped: one sentence a line
    limits = KnowledgeIngestSettings(chunk_size=300, chunk_overlap=60)
    knowledge = Knowledge.open(db_url, limits=limits)
    try:
        knowledge.ingest("kb", [tmp_path / "long.txt"])
        passages = [h.text for h in knowledge.search("kb", " ".join(f"topic{i}" for i in range(0, 200, 7)), k=50)]
        assert passages and all(len(p) <= 300 for p in passages)
        for text in passages:  # whole sentences: never "ic137." cut from "topic137"
            assert text.startswith("Sentence ") and text.endswith("nothing else of note."), text
            assert "\n" not in text  # the file's line breaks inside a paragraph are joined
        ordered = sorted(passages, key=lambda p: int(p.split()[1]))
        first, second = ordered[0], ordered[1]
        assert first.split(". ")[-1] == second.split(". ")[0] or second.split()[1] <= first.split(". ")[-1].split()[1]
        wider = Knowledge.open(db_url, limits=KnowledgeIngestSettings(chunk_size=1000, chunk_overlap=0))
        try:  # other chunk settings cut the unchanged file again
            assert wider.ingest("kb", [tmp_path / "long.txt"]).updated == ["long.txt"]
            assert max(len(h.text) for h in wider.search("kb", "topic5 topic150", k=5)) > 300
        finally:
            wider.close()
    finally:
        knowledge.close()


def test_latin_1_and_windows_text_files_are_read_correctly(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "menu.txt").write_bytes("# Café\n\nLe café crème coûte 3 €, déjà prêt.\n".encode("cp1252"))
    (tmp_path / "old.md").write_bytes("# Grüße\n\nSchöne Grüße aus Köln.\n".encode("latin-1"))
    (tmp_path / "bom.md").write_bytes("\ufeffNaïve café, in UTF-8 with a BOM.\n".encode())
    (tmp_path / "wide.txt").write_bytes("Crème brûlée in UTF-16.\n".encode("utf-16"))
    knowledge = Knowledge.open(db_url)
    try:
        assert knowledge.ingest("kb", [tmp_path]).ok
        assert knowledge.search("kb", "café crème")[0].text == "Le café crème coûte 3 €, déjà prêt."
        assert knowledge.search("kb", "Köln")[0].text == "Schöne Grüße aus Köln."
        assert knowledge.search("kb", "naïve")[0].text == "Naïve café, in UTF-8 with a BOM."
        assert knowledge.search("kb", "brûlée")[0].text == "Crème brûlée in UTF-16."
        assert knowledge.search("kb", "café crème")[0].metadata["encoding"] == "cp1252"
    finally:
        knowledge.close()
    with pytest.raises(ValueError, match="unknown encoding 'klingon'"):
        KnowledgeIngestSettings(encodings=["utf-8", "klingon"])


def test_a_follow_up_is_searched_with_the_earlier_turns_when_configured(db_url: str) -> None:
    pack = copy.deepcopy(FAQ_PACK)
    pack["settings"]["knowledge"]["fallback"]["query_turns"] = 2
    plain = _faq_engine(db_url)
    try:
        first = plain.process("how much does express delivery cost")
        assert "9.90 EUR" in first.text
        lost = plain.process("and how long does that take?", first.conversation_id)
        assert lost.text.startswith("Sorry, I don't know that one")  # the message alone has no topic
    finally:
        plain.close()
    aware = Engine.open(db_url, pack=pack, replace=True)  # the same database, another setting
    try:
        first = aware.process("how much does express delivery cost")
        follow = aware.process("and how long does that take?", first.conversation_id)
        assert "express delivery takes 1 to 2 business days" in follow.text
        assert follow.payload.sources[0]["source"] == "shipping.md"
        answered = [e for e in aware.audit(first.conversation_id) if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED"][-1]
        assert answered.payload["message"] == "and how long does that take?"
        assert answered.payload["query"] == "how much does express delivery cost and how long does that take?"
        alone = aware.process("when are you open?", first.conversation_id)  # found alone: searched alone
        last = [e for e in aware.audit(first.conversation_id) if e.stage == "KNOWLEDGE_FALLBACK_ANSWERED"][-1]
        assert "Monday to Friday" in alone.text and "message" not in last.payload
    finally:
        aware.close()
