"""A flow knowledge node's ``where`` filter rendered from what the caller sent (``inputParams``, the flows' ``user``
scope): the value is only a value to compare (never SQL, JSON path or a wider match). (A NUL character is
refused at the door for messages and inputParams; one from a service reply or an LLM finds nothing.)
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio

HOSTILE = ["en' OR '1'='1", "en\") OR 1=1 --", "$.lang", "%", "*", "en\u2028", "x" * 5000]


def _pack() -> dict:
    nodes = [node("KB", "start", "start"),
             node("KB", "search", "knowledge", query="opening hours", knowledge_bases=["faq"], min_score=0.5,
                  where={"lang": "{{ user.lang }}"}),
             node("KB", "none", "message", text="Nothing in that language."),
             node("KB", "end", "end")]
    edges = [*chain("KB", "start", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "KB", "intent_code": "GREETING", "priority": 1}])


async def test_a_user_value_in_a_filter_matches_only_itself(db_url: str) -> None:
    async with engine_on(db_url, _pack()) as engine:
        for source, lang in [("hours-en.md", "en"), ("hours-fr.md", "fr")]:
            await asyncio.to_thread(engine.knowledge.add_text, "faq", source, f"Opening hours ({lang}): nine to five.",
                                    metadata={"lang": lang})
        french = await engine.aprocess("hello", input_params={"lang": "fr"})
        assert [s["source"] for s in french.payload.sources] == ["hours-fr.md"]
        for value in HOSTILE:
            result = await engine.aprocess("hello", input_params={"lang": value})
            assert result.text == "Nothing in that language.", (value, result.text)
            assert payload_of(await turn_events(engine, result.conversation_id), "FLOW_KNOWLEDGE")["found"] is False
