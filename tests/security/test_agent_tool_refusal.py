"""An agent node's planner replies are untrusted: the model may name any tool the engine has. Only the
tools the node declares in ``tools`` run; every other name (another registered tool, a near-miss
spelling, an MCP-server code, a huge string) is refused, audited as
``FLOW_AGENT_TOOL`` status ``REFUSED`` with its reason, and the model is told, on SQLite and PostgreSQL.
A provider-qualified ``model`` may not make the engine import anything but a ``langchain_*`` chat model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError
from convengine.llm import ScriptedLLM
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, turn_events

pytestmark = pytest.mark.asyncio

HOSTILE = [("accounts.close", {"account": "all"}, "NOT_DECLARED"),
           ("Rates.Lookup", {}, "NOT_DECLARED"),
           ("rates.lookup ", {}, "NOT_DECLARED"),
           ("bank/transfer", {"to": "attacker"}, "NOT_DECLARED"),
           ("x" * 100_000, {}, "NOT_DECLARED")]


def plan(code: str, args: Any) -> dict[str, Any]:
    return {"action": "CALL_TOOL", "tool_code": code, "args": args, "answer": None, "operation_tag": None}


def agent_flow(**config: Any) -> dict[str, Any]:
    nodes = [node("AG", "start", "start"),
             node("AG", "helper", "agent", instructions="Answer rate questions.", tools=["rates.lookup"],
                  max_steps=len(HOSTILE) + 1, **config),
             node("AG", "broken", "message", text="Agent failed."), node("AG", "end", "end")]
    edges = [*chain("AG", "start", "helper", "end"), edge("AG", "helper", "broken", outcome="error"),
             edge("AG", "broken", "end")]
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "AG", "intent_code": "GREETING", "priority": 1}])
    data["ce_mcp_tool"] = [{"tool_code": code, "tool_group": "CALCULATOR_TRANSFORM", "description": code}
                           for code in ("rates.lookup", "accounts.close")]
    return data


async def test_tools_the_node_does_not_declare_never_run(db_url: str) -> None:
    ran: list[tuple[str, Any]] = []
    replies = [plan(code, args) for code, args, _ in HOSTILE]
    replies.append({"action": "ANSWER", "tool_code": None, "args": None, "answer": "Done.", "operation_tag": None})
    llm = ScriptedLLM({"MCP_PLANNER": replies, "INTENT_AGENT": {"intent": None, "confidence": 0}},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    tools = {"rates.lookup": lambda args: ran.append(("rates.lookup", args)) or {"rate": 5.5},
             "accounts.close": lambda args: ran.append(("accounts.close", args)) or {"closed": True}}
    async with engine_on(db_url, agent_flow(), llm=llm, tools=tools) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "Done."
        assert ran == []
        refused = [e.payload for e in await turn_events(engine, result.conversation_id) if e.stage == "FLOW_AGENT_TOOL"]
        assert [(p["status"], p["reason"]) for p in refused] == [("REFUSED", reason) for _, _, reason in HOSTILE]
        assert all(len(p["tool"]) <= 200 for p in refused)
        observations = json.loads(llm.calls_to("MCP_PLANNER")[-1].user_text)["observations"]
        assert len(observations) == len(HOSTILE)
        assert all(o["error"].startswith("refused:") and '["rates.lookup"]' in o["error"] for o in observations)
        assert all(len(o["error"]) < 500 for o in observations)


@pytest.mark.parametrize("model", ["os.system:echo", "antigravity.x:y", "subprocess.Popen:ls",
                                   "langchain_core..x:y", "openai:", "anthropic:   "])
async def test_a_model_name_that_would_import_anything_else_is_refused_at_load(db_url: str, model: str) -> None:
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, agent_flow(model=model), llm=ScriptedLLM({})):
            pass
    assert "flow AG node helper" in str(caught.value) and "model" in str(caught.value)
