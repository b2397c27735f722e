"""The HANDOFF rule action: a rule hands the conversation to a human, as a handoff node does.
Public API and audit, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.flows.packs import flows_pack
from tests.flows.test_flows import position
from tests.helpers import engine_on, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


def handoff_pack() -> dict:
    data = flows_pack()
    data["ce_rule"] = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "ANY", "state_code": "ANY",
                        "rule_type": "REGEX", "match_pattern": r"(?i)\b(person|human)\b", "action": "HANDOFF",
                        "action_value": "asked for a person", "priority": 1},
                       {"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "ANY", "state_code": "ANY",
                        "rule_type": "REGEX", "match_pattern": r"(?i)\b(person|human)\b", "action": "SET_STATE",
                        "action_value": "HUMAN", "priority": 2}]
    data["ce_response"].append({"intent_code": "UNKNOWN", "state_code": "HUMAN",
                                "exact_text": "A person will join this chat shortly."})
    return data


async def test_a_rule_hands_off_the_bot_stays_silent_and_resume_gives_it_back(db_url: str) -> None:
    async with engine_on(db_url, handoff_pack()) as engine:
        asked = await engine.aprocess("can I speak to a person")
        cid = asked.conversation_id
        assert (asked.text, asked.status) == ("A person will join this chat shortly.", "HANDOFF")
        events = await turn_events(engine, cid)
        assert payload_of(events, "HANDOFF") == {"ruleId": 1, "status": "HANDOFF", "reason": "asked for a person"}
        assert payload_of(events, "FLOW_HANDOFF") == {"rule": 1, "reason": "asked for a person"}

        silent = await engine.aprocess("I want a loan", cid)  # a human has it: no flow starts
        assert (silent.text, silent.status) == ("", "HANDOFF")
        assert payload_of(await turn_events(engine, cid), "FLOW_HANDOFF_MESSAGE")["text"] == "I want a loan"
        assert await position(engine, cid) == []

        resumed = await engine.aresume_from_handoff(cid)
        assert resumed.status == "RUNNING"
        assert "FLOW_HANDOFF_RESUMED" in await turn_stages(engine, cid)
        loan = await engine.aprocess("I want a loan", cid)
        assert loan.text == "How much would you like to borrow?" and loan.status == "RUNNING"

