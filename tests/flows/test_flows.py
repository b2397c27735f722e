"""Flow scenarios through the public Python API and the audit, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convengine.catalog.errors import ConvEngineError, InvalidInputError
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import assert_in_order, engine_on, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


async def position(engine: Any, cid: str) -> list[tuple[str, str, str]]:
    flow = (await engine.astate(cid)).get("flow") or {}
    return [(f["flow"], f["node"], f["mode"]) for f in flow.get("stack", [])]


def intent_changes(events: list[Any]) -> list[tuple[str, str, str]]:
    """The turn's intent changes as the audit records them: (from, to, what caused it)."""
    return [(e.payload["fromIntent"], e.payload["toIntent"], e.payload["cause"]) for e in events
            if e.stage == "INTENT_UPDATED"]


async def test_welcome_form_digression_reprompts_handoff_and_resume(db_url: str) -> None:
    async with engine_on(db_url, flows_pack()) as engine:
        first = await engine.astart()
        cid = first.conversation_id
        assert first.payload.type == "JSON"
        assert first.payload.value["messages"][0]["text"] == "Hi, I am the loan assistant."
        assert first.payload.value["messages"][0]["blocks"][0]["options"] == ["loan", "hello"]

        asked = await engine.aprocess("I want a loan", cid)
        assert asked.text == "How much would you like to borrow?"
        assert asked.intent == "LOAN"
        assert await position(engine, cid) == [("LOAN", "ask_amount", "wait")]

        junk = await engine.aprocess("lots", cid)
        assert junk.text == "Please give the amount as a number."

        digress = await engine.aprocess("hello", cid)  # another intent mid-form: its flow, then the same question
        assert digress.text == "Hello! How can I help?\nHow much would you like to borrow?"
        assert digress.intent == "LOAN"
        assert_in_order(await turn_stages(engine, cid), ["FLOW_DIGRESSION", "FLOW_STARTED", "FLOW_COMPLETED",
                                                         "FLOW_RETURNED", "FLOW_WAITING"])
        assert intent_changes(await turn_events(engine, cid)) == [("LOAN", "GREETING", "CLASSIFIER"),
                                                                  ("GREETING", "LOAN", "FLOW")]

        second = await engine.aprocess("umm", cid)
        assert second.text == "A number like 5000, please."
        escalated = await engine.aprocess("no idea", cid)
        assert escalated.text == "Let me connect you with a loan officer."
        assert escalated.status == "HANDOFF"
        assert "FLOW_ENTITY_ESCALATED" in await turn_stages(engine, cid)

        subscription = engine.subscribe(cid)
        silent = await engine.aprocess("hello? anyone?", cid)
        assert silent.status == "HANDOFF" and silent.text == ""
        recorded = payload_of(await turn_events(engine, cid), "FLOW_HANDOFF_MESSAGE")
        assert recorded["text"] == "hello? anyone?"
        await asyncio.sleep(0)
        streamed = []
        while not subscription.queue.empty():
            event = subscription.queue.get_nowait()
            if event.stage == "FLOW_HANDOFF_MESSAGE":
                streamed.append(event.payload["text"])
        assert streamed == ["hello? anyone?"]  # what a human agent's live view receives
        engine.bus.unsubscribe(subscription)
        history = await engine.ahistory(cid)
        assert history[-1]["user_input"] == "hello? anyone?"

        resumed = await engine.aresume_from_handoff(cid)
        assert resumed.text == "Welcome back to the bot.\nHow much would you like to borrow?"
        assert resumed.status == "RUNNING"
        done = await engine.aprocess("25,000", cid)
        assert done.text == "25000 is a large loan; an officer will review it."
        assert await position(engine, cid) == []  # back at the root
        assert done.intent == "UNKNOWN"
        assert intent_changes(await turn_events(engine, cid)) == [("LOAN", "UNKNOWN", "FLOW")]  # the root has none
        assert (await engine.astate(cid))["flow"]["vars"]["amount"] == 25000
        with pytest.raises(InvalidInputError, match="not handed off"):
            await engine.aresume_from_handoff(cid)
        with pytest.raises(InvalidInputError, match="only starts a new conversation"):
            await engine.astart(cid)


async def test_router_set_subflow_fallback_and_template_values(db_url: str) -> None:
    nodes = [
        node("ROUTE", "start", "start"),
        node("ROUTE", "ask", "entity", variable="choice", prompt="Say red, blue or anything."),
        node("ROUTE", "route", "router"),
        node("ROUTE", "red", "set", variable="colour", expression="'R' + upper(session.choice)"),
        node("ROUTE", "blue", "subflow", flow="SUB"),
        node("ROUTE", "other", "fallback", text="I did not get {{ session.choice }}."),
        node("ROUTE", "say", "message", text="colour={{ session.colour }} sub={{ session.sub_said }}"),
        node("ROUTE", "end", "end"),
        node("SUB", "start", "start"),
        node("SUB", "mark", "set", variable="sub_said", value="yes from {{ session.choice }}"),
        node("SUB", "end", "end", text="(sub done)"),
    ]
    edges = [
        *chain("ROUTE", "start", "ask", "route"),
        edge("ROUTE", "route", "red", condition="lower(session.choice) == 'red'", priority=1),
        edge("ROUTE", "route", "blue", condition="contains(session.choice, 'blue')", priority=2),
        edge("ROUTE", "route", "other"),
        edge("ROUTE", "red", "say"), edge("ROUTE", "blue", "say"), edge("ROUTE", "other", "ask"),
        edge("ROUTE", "say", "end"),
        *chain("SUB", "start", "mark", "end"),
    ]
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "ROUTE", "intent_code": "ROUTE"},
                                                       {"flow_code": "SUB"}])
    data["ce_intent"].append({"intent_code": "ROUTE", "description": "route"})
    data["ce_intent_classifier"].append({"intent_code": "ROUTE", "state_code": "UNKNOWN", "rule_type": "CONTAINS",
                                         "pattern": "route me", "priority": 3})
    async with engine_on(db_url, data) as engine:
        cid = (await engine.aprocess("route me", "00000000-0000-4000-8000-000000000001")).conversation_id
        other = await engine.aprocess("green", cid)
        assert other.text == "I did not get green.\nSay red, blue or anything."
        blue = await engine.aprocess("light blue", cid)
        assert blue.text == "(sub done)\ncolour= sub=yes from light blue"
        assert_in_order(await turn_stages(engine, cid), ["FLOW_SUBFLOW_CALL", "FLOW_STARTED", "FLOW_COMPLETED",
                                                         "FLOW_RETURNED", "FLOW_COMPLETED"])
        again = await engine.aprocess("route me", cid)
        assert again.text == "Say red, blue or anything."
        red = await engine.aprocess("Red", cid)
        assert red.text == "colour=RRED sub=yes from light blue"


async def test_step_guard_stops_the_turn_and_keeps_the_conversation(db_url: str) -> None:
    nodes = [node("LONG", "start", "start"), *[node("LONG", f"n{i}", "set", variable="i", value=str(i))
                                               for i in range(10)], node("LONG", "end", "end", text="finished")]
    edges = chain("LONG", "start", *[f"n{i}" for i in range(10)], "end")
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "LONG", "intent_code": "GREETING",
                                                        "priority": 1}], **{"max-steps-per-turn": 8})
    async with engine_on(db_url, data) as engine:
        started = await engine.aprocess("I want a loan")
        cid = started.conversation_id
        before = await engine.astate(cid)
        with pytest.raises(ConvEngineError, match="more than 8 node steps"):
            await engine.aprocess("hello", cid)
        after = await engine.astate(cid)
        assert after["turn"] == before["turn"] and after["flow"] == before["flow"]
        events = (await engine.aaudit(cid))
        assert "FLOW_STEP_LIMIT" in [e.stage for e in events]
        assert payload_of(events, "FLOW_STEP_LIMIT")["limit"] == 8


async def test_no_active_flow_skips_the_step(db_url: str) -> None:
    data = flows_pack()
    data["ce_intent"].append({"intent_code": "PLAIN", "description": "no flow"})
    data["ce_intent_classifier"].append({"intent_code": "PLAIN", "state_code": "UNKNOWN", "rule_type": "CONTAINS",
                                         "pattern": "plain", "priority": 3})
    data["ce_response"].append({"intent_code": "PLAIN", "state_code": "UNKNOWN", "exact_text": "Plain answer"})
    async with engine_on(db_url, data) as engine:
        greeted = await engine.aprocess("hello")  # a flow runs to its end: back at the root
        assert greeted.text == "Hello! How can I help?"
        result = await engine.aprocess("something plain", greeted.conversation_id)
        assert (result.intent, result.text) == ("PLAIN", "Plain answer")  # the pipeline answers as before
        skipped = [e.payload for e in await turn_events(engine, result.conversation_id)
                   if e.stage == "STEP_SKIPPED" and e.payload.get("step") == "flow"]
        assert skipped == [{"step": "flow", "reason": "NO_ACTIVE_FLOW"}]
