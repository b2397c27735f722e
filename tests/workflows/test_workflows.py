"""The workflow graph runtime through the public Python API and the audit, on SQLite and PostgreSQL:
routing by condition.expr, tool nodes through the tool bridge, sub-workflows, intent-mapped workflows."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ConvEngineError
from convengine.llm import ScriptedLLM
from convengine.workflows.step import position
from tests.helpers import assert_in_order, engine_on, turn_events, turn_stages
from tests.workflows.packs import (
    ORDER_TOOL,
    chain,
    edge,
    node,
    plan,
    support_pack,
    workflow,
    workflows_pack,
)

pytestmark = pytest.mark.asyncio
NO_INTENT = {"intent": None, "confidence": 0}


def routes(events: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(e.payload["from"], e.payload["to"], e.payload["condition"]) for e in events
            if e.stage == "WORKFLOW_ROUTED"]


async def test_routing_by_condition_on_text_and_on_variables(db_url: str) -> None:
    orders = iter([{"id": "A1", "status": "shipped", "vip": True, "customer": "Ann"}])
    llm = ScriptedLLM({"MCP_PLANNER": [plan(answer="How can I help?")]}, default=NO_INTENT)
    async with engine_on(db_url, support_pack(), llm=llm, tools={"orders.status": lambda a: next(orders)}) as engine:
        helped = await engine.aprocess("hi there")  # no condition holds: the default edge, the helper agent
        cid = helped.conversation_id
        assert helped.text == "How can I help?"
        assert ("route", "helper", None) in routes(await turn_events(engine, cid))

        by_text = await engine.aprocess("what about my ORDER A1", cid)  # condition.expr on the last user text
        assert by_text.text == "Order A1 is shipped.\nAnything else?"
        assert ("route", "order", "contains(text, 'order')") in routes(await turn_events(engine, cid))

        by_variable = await engine.aprocess("thanks", cid)  # session.order (the tool's result) routes now
        assert by_variable.text == "Hello again, valued customer Ann."
        assert ("route", "vip", "session.order.vip == true") in routes(await turn_events(engine, cid))

    async with engine_on(db_url, support_pack(), llm=llm) as engine:
        gold = await engine.aprocess("good morning", input_params={"tier": "gold"})  # user.* (input params)
        assert gold.text == "Gold desk: how can we help?"
        assert ("route", "gold", "user.tier == 'gold'") in routes(await turn_events(engine, gold.conversation_id))


async def test_tool_node_runs_through_the_tool_bridge_and_is_traced(db_url: str) -> None:
    seen: list[dict[str, Any]] = []

    def status(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        if len(seen) > 1:
            raise RuntimeError("order service down")
        return {"id": "B2", "status": "late"}

    async with engine_on(db_url, support_pack(), llm=ScriptedLLM({}, default=NO_INTENT),
                         tools={"orders.status": status}) as engine:
        late = await engine.aprocess("order B2 please")
        cid = late.conversation_id
        assert late.text == "Order B2 is late.\nAnything else?"
        assert seen == [{"text": "order B2 please"}]
        [traced] = [e for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_TOOL_EXECUTED"]
        assert traced.payload == {"workflow": "ORDER", "node": "lookup", "tool": "orders.status", "variable": "order",
                                  "args": {"text": "order B2 please"}, "status": "OK",
                                  "result": {"id": "B2", "status": "late"}}
        assert (await engine.astate(cid))["workflow"]["vars"]["order"] == {"id": "B2", "status": "late"}

        failed = await engine.aprocess("order again?", cid)  # the tool raises: the error edge
        assert failed.text == "The order service is down.\nAnything else?"
        [traced] = [e for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_TOOL_EXECUTED"]
        assert traced.payload["status"] == "ERROR" and traced.payload["errorCode"]
        assert ("lookup", "failed", None) in routes(await turn_events(engine, cid))


async def test_sub_workflow_is_entered_at_its_first_runnable_node_and_returns(db_url: str) -> None:
    """The sub-workflow waits (its agent greets), so the caller's position is visible while it runs."""
    nodes = [node("MAIN", "in", "trigger"), node("MAIN", "ask", "workflow", workflow="SURVEY"),
             node("MAIN", "bye", "end", text="Thanks!"),
             node("SURVEY", "begin", "trigger"),
             node("SURVEY", "agent", "instruction_agent", instructions="Ask for the name.", greeting="Your name?"),
             node("SURVEY", "end", "end")]
    edges = [*chain("MAIN", "in", "ask", "bye"), *chain("SURVEY", "begin", "agent", "end")]
    llm = ScriptedLLM({"MCP_PLANNER": [plan(answer="Noted.")]}, default=NO_INTENT)
    data = workflows_pack([workflow("MAIN"), workflow("SURVEY")], nodes, edges, root="MAIN")
    async with engine_on(db_url, data, llm=llm) as engine:
        asked = await engine.aprocess("start")
        cid = asked.conversation_id
        assert asked.text == "Your name?"
        assert position(await engine.astate(cid)) == [("MAIN", "ask", "return"), ("SURVEY", "agent", "wait")]
        assert_in_order(await turn_stages(engine, cid), ["WORKFLOW_STARTED", "WORKFLOW_CALL", "WORKFLOW_STARTED",
                                                          "WORKFLOW_WAITING"])
        started = [e.payload for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_STARTED"]
        assert started[1] == {"workflow": "SURVEY", "entry": "begin", "depth": 2, "cause": "SUBFLOW",
                              "caller": "MAIN"}

        done = await engine.aprocess("Ann", cid)
        assert done.text == "Noted.\nThanks!"
        assert position(await engine.astate(cid)) == []
        assert_in_order(await turn_stages(engine, cid), ["WORKFLOW_COMPLETED", "WORKFLOW_RETURNED",
                                                          "WORKFLOW_COMPLETED"])
        returned = [e.payload for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_RETURNED"]
        assert returned == [{"workflow": "MAIN", "node": "ask", "mode": "return"}]

        await engine.aprocess("start again", cid)  # waits in SURVEY again; a reset forgets that position
        restarted = await engine.aprocess("start over", cid, reset=True)
        assert restarted.text == "Your name?"
        [reset] = [e.payload for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_RESET"]
        assert position({"workflow": reset}) == [("MAIN", "ask", "return"), ("SURVEY", "agent", "wait")]
        started = [e.payload["cause"] for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_STARTED"]
        assert started == ["ROOT", "SUBFLOW"]  # entered anew at the root's trigger


async def test_an_intent_mapped_to_a_workflow_enters_it_and_flows_keep_their_intents(db_url: str) -> None:
    nodes = [node("RATES", "in", "trigger"), node("RATES", "say", "end", text="Rates are 5%."),
             node("HELLO", "start", "start"), node("HELLO", "end", "end", text="Hello from the flow.")]
    edges = [edge("RATES", "in", "say"), edge("HELLO", "start", "end")]
    data = workflows_pack([workflow("RATES", intent_code="LOAN"), {"flow_code": "HELLO", "intent_code": "GREETING"}],
                          nodes, edges)
    async with engine_on(db_url, data, llm=ScriptedLLM({}, default=NO_INTENT)) as engine:
        rates = await engine.aprocess("a loan please")
        cid = rates.conversation_id
        assert rates.text == "Rates are 5%."
        started = [e.payload for e in await turn_events(engine, cid) if e.stage == "WORKFLOW_STARTED"]
        assert started == [{"workflow": "RATES", "entry": "in", "depth": 1, "cause": "INTENT"}]
        hello = await engine.aprocess("hello", cid)
        assert hello.text == "Hello from the flow."
        assert "WORKFLOW_STARTED" not in await turn_stages(engine, cid)


async def test_a_router_loop_stops_at_the_step_guard_and_keeps_nothing(db_url: str) -> None:
    nodes = [node("LOOP", "in", "trigger"), node("LOOP", "a", "router"), node("LOOP", "b", "router"),
             node("LOOP", "end", "end")]
    edges = [edge("LOOP", "in", "a"), edge("LOOP", "a", "b"), edge("LOOP", "b", "end", condition="text == 'stop'",
                                                                    priority=1), edge("LOOP", "b", "a")]
    data = workflows_pack([workflow("LOOP")], nodes, edges, root="LOOP", ce_mcp_tool=ORDER_TOOL)
    async with engine_on(db_url, data, llm=ScriptedLLM({}, default=NO_INTENT)) as engine:
        cid = (await engine.aprocess("stop")).conversation_id  # text == 'stop' leaves the loop
        before = (await engine.astate(cid)).get("workflow")
        with pytest.raises(ConvEngineError, match="workflow LOOP took more than 64 node steps in one turn"):
            await engine.aprocess("go on", cid)
        assert (await engine.astate(cid)).get("workflow") == before
        [limit] = [e.payload for e in await engine.aaudit(cid) if e.stage == "FLOW_STEP_LIMIT"]
        assert (limit["workflow"], limit["limit"]) == ("LOOP", 64)

