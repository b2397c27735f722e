"""Instruction agent nodes, on SQLite and PostgreSQL: two declared tools (one called, an undeclared one
refused and the model told), the ``error`` edge when ``max_steps`` runs out, and the memory under
``_agent_memory_<node>`` that survives turns and stays bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convengine.flows.agent import MEMORY_MAX_CHARS, MEMORY_TURNS
from convengine.llm import ScriptedLLM
from tests.flows.packs import chain, edge, node
from tests.flows.test_nodes import one_flow
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio


def plan(**step: Any) -> dict[str, Any]:
    return {"action": "CALL_TOOL", "tool_code": None, "args": None, "answer": None, "operation_tag": None, **step}


TOOLS = [{"tool_code": code, "tool_group": "CALCULATOR_TRANSFORM", "description": text}
         for code, text in (("rates.lookup", "Today's rates"), ("fees.lookup", "Fees"),
                            ("accounts.close", "Closes the user's account"))]


def agent_pack(max_steps: int = 4, before: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """GREETING ("hello") enters the agent, which declares two tools; its error edge says "Agent failed."."""
    nodes = [node("AG", "start", "start"), *(before or []),
             node("AG", "helper", "agent", instructions="Answer rate and fee questions.",
                  tools=["rates.lookup", "fees.lookup"], max_steps=max_steps, stay=True),
             node("AG", "broken", "message", text="Agent failed."), node("AG", "end", "end")]
    ids = ["start", *(n["node_id"] for n in before or []), "helper", "end"]
    edges = [*chain("AG", *ids), edge("AG", "helper", "broken", outcome="error"), edge("AG", "broken", "end")]
    data = one_flow("AG", nodes, edges)
    data["ce_mcp_tool"] = TOOLS
    return data


class Handlers:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def tools(self) -> dict[str, Any]:
        def handler(code: str) -> Any:
            def run(args: dict[str, Any]) -> Any:
                self.calls.append((code, args))
                return {"rate": 5.5} if code == "rates.lookup" else {"closed": True}
            return run
        return {t["tool_code"]: handler(t["tool_code"]) for t in TOOLS}


async def test_a_declared_tool_runs_and_an_undeclared_one_is_refused_and_the_model_told(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [
        plan(tool_code="rates.lookup", args={"product": "loan"}),
        plan(tool_code="accounts.close", args={"account": "all"}),  # registered on the engine, not on the node
        plan(action="ANSWER", answer="Loans are at 5.5% today."),
    ], "INTENT_AGENT": {"intent": None, "confidence": 0}}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    handlers = Handlers()
    async with engine_on(db_url, agent_pack(), llm=llm, tools=handlers.tools()) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Loans are at 5.5% today."
        assert handlers.calls == [("rates.lookup", {"product": "loan"})]
        events = await turn_events(engine, result.conversation_id)
        tools = [(e.payload["tool"], e.payload["status"], e.payload.get("reason")) for e in events
                 if e.stage == "FLOW_AGENT_TOOL"]
        assert tools == [("rates.lookup", "OK", None), ("accounts.close", "REFUSED", "NOT_DECLARED")]
        first, _, last = llm.calls_to("MCP_PLANNER")
        assert "rates.lookup" in first.system and "fees.lookup" in first.system
        assert "accounts.close" not in first.system
        told = json.loads(last.user_text)["observations"][-1]
        assert told["tool"] == "accounts.close" and "not one of this agent's tools" in told["error"]
        assert '"rates.lookup", "fees.lookup"' in told["error"]
        assert payload_of(events, "FLOW_AGENT_ANSWERED")["steps"] == 3


async def test_running_out_of_max_steps_takes_the_error_edge(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": lambda call: plan(tool_code="fees.lookup", args={}),
                       "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    handlers = Handlers()
    async with engine_on(db_url, agent_pack(max_steps=2), llm=llm, tools=handlers.tools()) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Agent failed."
        assert len(llm.calls_to("MCP_PLANNER")) == 2 and len(handlers.calls) == 2
        failed = payload_of(await turn_events(engine, result.conversation_id), "FLOW_AGENT_FAILED")
        assert failed == {"flow": "AG", "node": "helper", "reason": "MAX_STEPS", "maxSteps": 2}
        assert (await engine.astate(result.conversation_id))["flow"]["stack"] == []  # the flow ended


async def test_the_memory_survives_turns_and_stays_bounded(db_url: str) -> None:
    """A python node fills the memory variable with far more than an agent keeps; the agent's prompt
    and the variable hold the last exchanges only, each cut to its bound, and the new one is added."""
    fill = node("AG", "fill", "python", code=(
        "session['_agent_memory_helper'] = [{'user': 'q%d' % i + 'x' * 5000, 'agent': 'a%d' % i} for i in range(50)]"
        " + ['not an exchange', 7]"))
    llm = ScriptedLLM({"MCP_PLANNER": [plan(action="ANSWER", answer="First."), plan(action="ANSWER", answer="Second.")],
                       "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, agent_pack(before=[fill]), llm=llm, tools=Handlers().tools()) as engine:
        first = await engine.aprocess("hello")
        assert first.text == "First."
        memory = (await engine.astate(first.conversation_id))["flow"]["vars"]["_agent_memory_helper"]
        assert len(memory) == MEMORY_TURNS and memory[-1] == {"user": "hello", "agent": "First."}
        assert memory[0]["user"].startswith("q41") and all(len(m["user"]) <= MEMORY_MAX_CHARS for m in memory)
        prompt = llm.calls_to("MCP_PLANNER")[0].system
        assert "q40" in prompt and "q39" not in prompt and "x" * (MEMORY_MAX_CHARS + 1) not in prompt
        second = await engine.aprocess("and fees?", first.conversation_id)
        assert second.text == "Second."
        assert '"agent": "First."' in llm.calls_to("MCP_PLANNER")[1].system
        memory = (await engine.astate(first.conversation_id))["flow"]["vars"]["_agent_memory_helper"]
        assert len(memory) == MEMORY_TURNS and memory[-2:] == [{"user": "hello", "agent": "First."},
                                                               {"user": "and fees?", "agent": "Second."}]
