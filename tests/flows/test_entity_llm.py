"""``entity`` nodes with ``extract: llm``: deterministic capture first, the SCHEMA_EXTRACTION call
site when it misses, the reply held to the node's type and pattern, and the monthly spend cap
respected. Public API and audit, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from convengine import ScriptedLLM
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio
NO_INTENT = {"intent": None, "confidence": 0}

TRIP_NODES = [
    node("TRIP", "start", "start"),
    node("TRIP", "ask_city", "entity", variable="city", prompt="Which city?", extract="llm",
         description="the city the user wants to visit", reprompts=["Which city, please?"], max_attempts=2),
    node("TRIP", "ask_nights", "entity", variable="nights", type="number", prompt="How many nights?",
         extract="llm", capture={"pattern": r"(\d+)"}, reprompts=["How many nights, as a number?"]),
    node("TRIP", "say", "message", text="{{ session.nights }} nights in {{ session.city }}."),
    node("TRIP", "done", "end"),
    node("TRIP", "give_up", "end", text="Sorry, let us start again later."),
]
TRIP_EDGES = [*chain("TRIP", "start", "ask_city", "ask_nights", "say", "done"),
              edge("TRIP", "ask_city", "give_up", outcome="escalate"),
              edge("TRIP", "ask_nights", "give_up", outcome="escalate")]


def trip_pack(**settings: Any) -> dict[str, Any]:
    data = flows_pack(nodes=TRIP_NODES, edges=TRIP_EDGES,
                      flows=[{"flow_code": "TRIP", "intent_code": "LOAN", "priority": 1}])
    data["settings"].update(settings)
    return data


async def test_the_llm_reads_what_the_deterministic_capture_cannot(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"city": "Paris"}]}, default=NO_INTENT)
    async with engine_on(db_url, trip_pack(), llm=llm) as engine:
        cid = (await engine.aprocess("a loan for a trip")).conversation_id
        city = await engine.aprocess("I would love to see Paris in spring", cid)
        assert city.text == "How many nights?"
        extracted = payload_of(await turn_events(engine, cid), "FLOW_ENTITY_LLM_EXTRACTED")
        assert extracted == {"flow": "TRIP", "node": "ask_city", "variable": "city", "callSite": "SCHEMA_EXTRACTION",
                             "found": True}
        call = llm.calls_to("SCHEMA_EXTRACTION")[0]
        assert "the city the user wants to visit" in call.system and "Paris in spring" in call.user

        typed = await engine.aprocess("4", cid)  # the pattern captures it: no LLM call
        assert typed.text == "4 nights in Paris."
        assert llm.count("SCHEMA_EXTRACTION") == 1

        cid = (await engine.aprocess("another loan trip")).conversation_id
        llm.add("SCHEMA_EXTRACTION", {"city": "Rome"}, {"nights": "lots"}, {"nights": 5})
        await engine.aprocess("Rome, I think", cid)
        bad = await engine.aprocess("lots of nights", cid)  # a reply of the wrong type is a failed answer
        assert bad.text == "How many nights, as a number?"
        skipped = payload_of(await turn_events(engine, cid), "FLOW_ENTITY_LLM_SKIPPED")
        assert skipped["reason"] == "LLM_ERROR" and skipped["errorCode"]
        good = await engine.aprocess("five nights would be great", cid)
        assert good.text == "5 nights in Rome."
        assert (await engine.astate(cid))["flow"]["vars"] == {"city": "Rome", "nights": 5}


async def test_at_the_spend_cap_the_llm_is_skipped_and_the_node_goes_on_deterministically(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"city": "Oslo"}]}, default=NO_INTENT)
    async with engine_on(db_url, trip_pack(llm={"spend": {"monthly-cap": 0}}), llm=llm) as engine:
        cid = (await engine.aprocess("a loan for a trip")).conversation_id
        again = await engine.aprocess("Oslo in winter", cid)
        assert again.text == "Which city, please?"
        stages = await turn_stages(engine, cid)
        assert "LLM_SPEND_CAP_REACHED" in stages
        skipped = payload_of(await turn_events(engine, cid), "FLOW_ENTITY_LLM_SKIPPED")
        assert skipped["reason"] == "SPEND_CAP_REACHED"
        assert llm.count("SCHEMA_EXTRACTION") == 0
        gave_up = await engine.aprocess("Oslo!", cid)
        assert gave_up.text == "Sorry, let us start again later."


async def test_without_an_llm_the_skip_is_audited(db_url: str) -> None:
    async with engine_on(db_url, trip_pack()) as engine:
        cid = (await engine.aprocess("a loan for a trip")).conversation_id
        again = await engine.aprocess("Lisbon", cid)
        assert again.text == "Which city, please?"
        skipped = payload_of(await turn_events(engine, cid), "FLOW_ENTITY_LLM_SKIPPED")
        assert skipped["reason"] == "NO_LLM_CONFIGURED"
