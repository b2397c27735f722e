"""The workflow runtime against what end users send: their text and input params reach routing
conditions, tool arguments and answers, always as values.

- Text written as a template (``{{ session }}``, ``{{ 7*7 }}``) or as Python reaches a tool node's
  arguments exactly as typed: the workflow's templates render user text as a value, never as source.
- A tool's result holding template syntax is said as text, not rendered again.
- Input params are ``user.*`` only: a caller sending ``order`` or ``session`` cannot set the workflow's
  variables (``session.*``) that routing conditions read.
"""

from __future__ import annotations

from typing import Any

import pytest

from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, turn_events
from tests.workflows.packs import plan, support_pack

pytestmark = pytest.mark.asyncio
NO_INTENT = {"intent": None, "confidence": 0}


async def test_user_text_reaches_a_tool_node_as_typed(db_url: str) -> None:
    seen: list[dict[str, Any]] = []

    def status(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"id": "{{ 7*7 }}", "status": "{{ session }}"}

    async with engine_on(db_url, support_pack(), llm=ScriptedLLM({}, default=NO_INTENT),
                         tools={"orders.status": status}) as engine:
        typed = "order {{ session }} {{ 7*7 }} __import__('os').system('id')"
        reply = await engine.aprocess(typed)
        assert seen == [{"text": typed}]
        assert reply.text == "Order {{ 7*7 }} is {{ session }}.\nAnything else?"


async def test_input_params_cannot_set_the_variables_routing_reads(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [plan(answer="How can I help?")]}, default=NO_INTENT)
    async with engine_on(db_url, support_pack(), llm=llm) as engine:
        forged = {"order": {"vip": True, "customer": "Mallory"}, "session": {"order": {"vip": True}}, "vars": {"x": 1}}
        reply = await engine.aprocess("hello", input_params=forged)
        cid = reply.conversation_id
        assert reply.text == "How can I help?"  # the default edge: session.order.vip is not the caller's to set
        assert "order" not in (await engine.astate(cid))["workflow"]["vars"]
        routed = [e.payload["to"] for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_ROUTED"]
        assert "vip" not in routed
