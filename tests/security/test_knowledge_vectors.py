"""Untrusted input on the vector side of retrieval: user text through the vector index, fusion and MMR,
metadata filters made of hostile strings, and stored vectors read back corrupted."""

from __future__ import annotations

import struct

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import InvalidInputError
from convengine.knowledge import HashingEmbeddings, Knowledge, SearchSettings
from tests.security.test_knowledge_inputs import HOSTILE


def _fill(knowledge: Knowledge) -> None:
    for i, text in enumerate(["Express deliveries arrive in two days.", "Refunds take five business days.",
                              "The shop opens at nine on Saturdays."]):
        knowledge.add_text("faq", f"doc{i}.md", text, metadata={"lang": "en"})


def test_user_text_reaches_the_index_fusion_and_mmr_as_text_only(db_url: str) -> None:
    knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings())
    try:
        _fill(knowledge)
        for text in [*HOSTILE, "shipping\x00returns"]:
            for options in ({}, {"fusion": "rrf"}, {"mmr": 0.5}, {"filters": {"lang": text[:200] or "x"}}):
                if "\x00" in text and "filters" in options:  # PostgreSQL text cannot hold it: refused alike
                    with pytest.raises(InvalidInputError, match="'lang': a text value cannot hold a NUL"):
                        knowledge.search("faq", text, **options)  # type: ignore[arg-type]
                    continue
                hits = knowledge.search("faq", text, **options)  # type: ignore[arg-type]
                assert all(0.0 <= h.score <= 1.0 for h in hits)
        assert [b["chunks"] for b in knowledge.list()] == [3]
        assert knowledge.search("faq", "express deliveries")[0].source == "doc0.md"
    finally:
        knowledge.close()


@pytest.mark.parametrize("key", ["$.a') OR 1=1 --", 'lang"', "a b", "", "x" * 65, "$[0]", "lang'--"])
def test_filter_keys_that_could_be_read_as_a_path_or_sql_are_refused(db_url: str, key: str) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        _fill(knowledge)
        with pytest.raises(InvalidInputError, match="metadata filter"):
            knowledge.search("faq", "refunds", filters={key: "en"})
        assert knowledge.search("faq", "refunds", filters={"lang": "en') OR 1=1 --"}) == []
    finally:
        knowledge.close()


def test_a_corrupted_stored_vector_never_ranks_as_a_perfect_match(db_url: str) -> None:
    for index in ("auto", "brute-force"):
        knowledge = Knowledge.open(db_url, embeddings=HashingEmbeddings(),
                                   settings=SearchSettings(vector_index=index))  # type: ignore[arg-type]
        try:
            _fill(knowledge)
            nan = struct.pack("<f", float("nan")) * 384
            with knowledge.engine.begin() as conn:  # bytes in the database are untrusted once read back
                conn.execute(sa.text("UPDATE ce_knowledge_chunk SET embedding = :e WHERE text LIKE 'The shop%'"),
                             {"e": nan})
                conn.execute(sa.text("UPDATE ce_knowledge_base SET revision = revision + 1"))
            hits = knowledge.search("faq", "express deliveries two days", k=3)
            assert hits[0].source == "doc0.md"
            assert all(h.vector is None or 0.0 <= h.vector < 0.99 for h in hits if h.source == "doc2.md")
            assert all(h.score == h.score for h in hits)  # no NaN score
        finally:
            knowledge.delete("faq")
            knowledge.close()
