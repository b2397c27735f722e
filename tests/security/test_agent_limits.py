"""An agent node's loop against a hostile planner: the LLM's replies decide whether the loop goes on
(CALL_TOOL) or ends (ANSWER), so the pack's ``max_steps`` is the only bound on a turn's planner calls.

A reply that asks for a tool forever made a turn with ``max_steps: 100000`` run for hours (each
step re-sends every observation so far: quadratic time, and an audit row per step), holding the
conversation. ``max_steps`` is now a whole number from 1 to ``AGENT_MAX_STEPS``, refused at load
otherwise, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import flows as vocab
from convengine.catalog.errors import ConfigValidationError
from convengine.llm import ScriptedLLM
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio
FOREVER = {"action": "CALL_TOOL", "tool_code": "lookup", "args": {"q": "again"}, "answer": None,
           "operation_tag": None}


def agent_flow(**config: Any) -> dict[str, Any]:
    """GREETING ("hello") enters the agent; "Agent failed." on its error edge."""
    nodes = [node("AG", "start", "start"), node("AG", "helper", "agent", instructions="Answer.", **config),
             node("AG", "broken", "message", text="Agent failed."), node("AG", "end", "end")]
    edges = [*chain("AG", "start", "helper", "end"), edge("AG", "helper", "broken", outcome="error"),
             edge("AG", "broken", "end")]
    return flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "AG", "intent_code": "GREETING", "priority": 1}])


def hostile_planner() -> ScriptedLLM:
    return ScriptedLLM({"MCP_PLANNER": lambda call: FOREVER}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})


@pytest.mark.parametrize("max_steps", [100_000, vocab.AGENT_MAX_STEPS + 1, 0, -3, 2.5, "lots", True])
async def test_max_steps_past_the_bound_or_not_a_count_is_refused_at_load(db_url: str, max_steps: Any) -> None:
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, agent_flow(max_steps=max_steps), llm=hostile_planner()):
            pass
    message = str(caught.value)
    assert "flow AG node helper" in message and "max_steps" in message, message


async def test_a_planner_that_never_answers_stops_at_max_steps(db_url: str) -> None:
    llm = hostile_planner()
    async with engine_on(db_url, agent_flow(max_steps=vocab.AGENT_MAX_STEPS), llm=llm) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Agent failed."
        assert len(llm.calls_to("MCP_PLANNER")) == vocab.AGENT_MAX_STEPS
        failed = payload_of(await turn_events(engine, result.conversation_id), "FLOW_AGENT_FAILED")
        assert failed["reason"] == "MAX_STEPS"
