"""Seed-003 details of flow nodes, on SQLite and PostgreSQL: a knowledge query built from the conversation
summary, python nodes' ``user`` (long-term properties) and ``workspace`` (pack values) scopes, and what a
script prints shown in the trace (``chat --trace`` and the console's turn view)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from convengine.api.app import create_app
from convengine.cli.chat import print_trace
from convengine.llm import ScriptedLLM
from tests.flows.packs import chain, edge, node
from tests.flows.test_nodes import one_flow
from tests.helpers import engine_on, payload_of, turn_events
from tests.servers import in_process, post

pytestmark = pytest.mark.asyncio
SUMMARY = "The user is asking when the branch opens."


def knowledge_pack(**search: Any) -> dict[str, Any]:
    """hello -> asks a topic, then a question; the knowledge node searches with ``search``'s options."""
    nodes = [node("KB", "start", "start"), node("KB", "topic", "entity", variable="topic", prompt="Topic?"),
             node("KB", "ask", "entity", variable="q", prompt="Your question?"),
             node("KB", "search", "knowledge", knowledge_bases=["faq"], min_score=0.3, **search),
             node("KB", "none", "message", text="I could not find that."), node("KB", "end", "end")]
    edges = [*chain("KB", "start", "topic", "ask", "search", "end"), edge("KB", "search", "none", outcome="not_found"),
             edge("KB", "none", "end")]
    data = one_flow("KB", nodes, edges)
    data["ce_memory"] = [{"intent_code": "GREETING", "state_code": "ANY", "recent_turns": 1, "summary_max_chars": 300}]
    return data


async def ask_after_summary(db_url: str, data: dict[str, Any]) -> dict[str, Any]:
    llm = ScriptedLLM({"MEMORY_SUMMARY": lambda call: SUMMARY, "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, data, llm=llm) as engine:
        await asyncio.to_thread(engine.knowledge.add_text, "faq", "hours.md",
                                "Opening hours: the branch opens at nine and closes at five.")
        cid = (await engine.aprocess("hello")).conversation_id
        await engine.aprocess("branch visits", cid)
        result = await engine.aprocess("and on saturdays?", cid)
        return {"text": result.text, **payload_of(await turn_events(engine, cid), "FLOW_KNOWLEDGE")}


async def test_a_knowledge_query_from_the_summary_finds_what_the_message_alone_does_not(db_url: str) -> None:
    found = await ask_after_summary(db_url, knowledge_pack(query_from=["summary", "message"]))
    assert found["query"] == f"{SUMMARY}\nand on saturdays?" and found["queryFrom"] == ["summary", "message"]
    assert found["found"] is True and "opens at nine" in found["text"]
    alone = await ask_after_summary(db_url, knowledge_pack())
    assert alone["query"] == "and on saturdays?" and alone["found"] is False
    assert alone["text"] == "I could not find that."


@pytest.mark.parametrize("query_from", ["history", ["summary", 3], []])
async def test_a_bad_query_from_is_refused_at_load(db_url: str, query_from: Any) -> None:
    from convengine.catalog.errors import ConfigValidationError

    with pytest.raises(ConfigValidationError, match="flow KB node search.*query_from must be one of"):
        async with engine_on(db_url, knowledge_pack(query_from=query_from)):
            pass


SCRIPT = """
print("tier before:", user.get("tier"), "currency:", workspace["currency"])
user["tier"] = "gold" if params.get("spent", 0) > 1000 else user.get("tier", "basic")
workspace["currency"] = "XXX"
session["currency"] = workspace["currency"]
"""


def scopes_pack() -> dict[str, Any]:
    nodes = [node("PY", "start", "start"), node("PY", "score", "python", code=SCRIPT),
             node("PY", "say", "message", text="{{ session.currency }} / {{ workspace.currency }}"),
             node("PY", "end", "end")]
    data = one_flow("PY", nodes, chain("PY", "start", "score", "say", "end"), workspace={"currency": "EUR"})
    data["settings"]["conversation_memory"] = {"long_term": ["tier", "pin"], "secret": ["pin"]}
    return data


async def test_a_script_reads_the_workspace_and_keeps_the_users_long_term_properties(db_url: str) -> None:
    async with engine_on(db_url, scopes_pack()) as engine:
        first = await engine.aprocess("hello", input_params={"spent": 5000}, user_id="ana")
        assert first.text == "XXX / EUR"  # the script's copy of the workspace changed; the pack's did not
        assert await engine.aproperties("ana") == {"tier": "gold"}
        ran = payload_of(await turn_events(engine, first.conversation_id), "FLOW_SCRIPT_RAN")
        assert ran["stdout"] == "tier before: None currency: EUR\n" and ran["userChanged"] == ["tier"]
        second = await engine.aprocess("hello", user_id="ana")  # a new conversation of the same user
        assert "tier before: gold" in payload_of(await turn_events(engine, second.conversation_id),
                                                 "FLOW_SCRIPT_RAN")["stdout"]
        assert await engine.aproperties("bob") == {}


async def test_print_output_is_in_the_chat_trace_and_the_console_turn_view(db_url: str) -> None:
    async with engine_on(db_url, scopes_pack()) as engine:
        result = await engine.aprocess("hello", user_id="ana")
        out = io.StringIO()
        await asyncio.to_thread(print_trace, Console(file=out, width=200, color_system=None), engine, result)
        assert "print PY/score tier before: None currency: EUR" in out.getvalue()
    async with in_process(create_app(db_url, pack=scopes_pack())) as client:
        cid = (await post(client, "hello"))["conversationId"]
        turn = (await client.get(f"/console/api/conversations/{cid}/turns/1")).json()
        assert turn["scriptOutput"] == [{"flow": "PY", "node": "score", "stdout": "tier before: None currency: EUR\n",
                                         "error": None}]
