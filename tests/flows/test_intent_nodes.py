"""``intent`` nodes: the entry of a matched intent inside a flow, and digressions between the
entries of one flow. Public API and audit, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.flows.packs import chain, flows_pack, node
from tests.flows.test_flows import position
from tests.helpers import engine_on, payload_of, turn_events

pytestmark = pytest.mark.asyncio

ASSIST_NODES = [
    node("ASSIST", "hours", "intent", intent="hours"),
    node("ASSIST", "say_hours", "message", text="We open at 9."),
    node("ASSIST", "hours_end", "end"),
    node("ASSIST", "order", "intent", intent="ORDER"),
    node("ASSIST", "ask_order", "entity", variable="order", prompt="Your order number?",
         capture={"pattern": r"(\d+)"}),
    node("ASSIST", "tell", "message", text="Order {{ session.order }} is on its way."),
    node("ASSIST", "order_end", "end"),
]
ASSIST_EDGES = [*chain("ASSIST", "hours", "say_hours", "hours_end"),
                *chain("ASSIST", "order", "ask_order", "tell", "order_end")]


def assist_pack() -> dict[str, Any]:
    data = flows_pack(nodes=ASSIST_NODES, edges=ASSIST_EDGES,
                      flows=[{"flow_code": "ASSIST", "description": "one flow, two intents"}])
    data["ce_intent"] += [{"intent_code": "HOURS", "description": "opening hours"},
                          {"intent_code": "ORDER", "description": "where is my order"}]
    data["ce_intent_classifier"] += [
        {"intent_code": "HOURS", "rule_type": "CONTAINS", "pattern": "hours", "priority": 3},
        {"intent_code": "ORDER", "rule_type": "CONTAINS", "pattern": "order", "priority": 4}]
    return data


async def test_a_matched_intent_enters_its_intent_node_and_another_digresses_within_the_flow(db_url: str) -> None:
    async with engine_on(db_url, assist_pack()) as engine:
        asked = await engine.aprocess("where is my order")
        cid = asked.conversation_id
        assert (asked.text, asked.intent) == ("Your order number?", "ORDER")
        assert await position(engine, cid) == [("ASSIST", "ask_order", "wait")]
        started = payload_of(await turn_events(engine, cid), "FLOW_STARTED")
        assert (started["entry"], started["intent"], started["cause"]) == ("order", "ORDER", "INTENT")

        digress = await engine.aprocess("what are your hours?", cid)
        assert digress.text == "We open at 9.\nYour order number?"
        assert digress.intent == "ORDER"  # back in the interrupted call
        moved = payload_of(await turn_events(engine, cid), "FLOW_DIGRESSION")
        assert (moved["from"], moved["at"], moved["to"], moved["entry"]) == ("ASSIST", "ask_order", "ASSIST", "hours")
        assert await position(engine, cid) == [("ASSIST", "ask_order", "wait")]

        done = await engine.aprocess("my order is 42", cid)  # the intent already served: the answer
        assert done.text == "Order 42 is on its way."
        assert await position(engine, cid) == [] and done.intent == "UNKNOWN"

        hours = await engine.aprocess("hours please", cid)  # from the root, straight to the other entry
        assert hours.text == "We open at 9." and await position(engine, cid) == []
