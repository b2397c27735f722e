"""Untrusted text reaches full-text search: it must never be read as query syntax or SQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from convengine import Engine, InvalidInputError
from convengine.knowledge import Knowledge

ROOT = Path(__file__).parents[2]
PACK = yaml.safe_load((ROOT / "examples" / "faq_assistant.yaml").read_text())

HOSTILE = [
    '"', '""', "'", "*", "^", "-", "NEAR(shipping returns, 2)", "title:shipping", "shipping AND OR NOT returns",
    "(((((", "))))", "shipping\u2028returns\t\n", "'); DROP TABLE ce_knowledge_chunk; --",
    "ce_knowledge_fts MATCH 'x'", "shipping | returns & !hours", "<->", ":*", "\\", "%_%", "日本語 の 質問",
    "a" * 5000, " ".join(f"w{i}" for i in range(5000)),
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_query_syntax_from_users_is_only_text(db_url: str, text: str, tmp_path: Path) -> None:
    engine = Engine.open(db_url, pack=PACK)
    try:
        engine.knowledge.ingest("faq", [ROOT / "examples" / "faq"])
        before = engine.knowledge.list()
        result = engine.process(text)
        assert result.turn == 1
        events = {e.stage: e.payload for e in engine.audit(result.conversation_id)}
        fallback = events.get("KNOWLEDGE_FALLBACK_ANSWERED") or events.get("KNOWLEDGE_FALLBACK_NO_MATCH")
        if fallback is not None:
            assert len(fallback["query"]) <= 1000
        assert engine.knowledge.list() == before
        assert engine.knowledge.search("faq", "express delivery")  # the index still answers
    finally:
        engine.close()


def test_direct_searches_take_any_text(db_url: str) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        knowledge.ingest("faq", [ROOT / "examples" / "faq"])
        for text in [*HOSTILE, "shipping\x00returns"]:
            hits = knowledge.search("faq", text)
            assert all(0.0 <= h.score <= 1.0 for h in hits)
        assert knowledge.search(["faq", "no-such-base"], "shipping")[0].kb_name == "faq"
        assert knowledge.search("no-such-base", "shipping") == []
    finally:
        knowledge.close()


@pytest.mark.parametrize("name", ["", "../etc", "a b", "x" * 65, "faq'; --", "é"])
def test_knowledge_base_names_are_checked(db_url: str, name: str) -> None:
    knowledge = Knowledge.open(db_url)
    try:
        with pytest.raises(InvalidInputError, match="knowledge base name"):
            knowledge.add_text(name, "doc", "text")
        assert knowledge.list() == []
    finally:
        knowledge.close()
