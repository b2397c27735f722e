"""Item 13: an LLM policy's reply is untrusted. A reply that is not ``{"violates": <boolean>}``
(prose, another JSON shape, a string "false", JSON nested deep enough to exhaust the parser...)
neither crashes the turn nor slips past the policy: it is an undecided check, blocked when the pack
is fail-closed and allowed (audited) otherwise."""

from __future__ import annotations

import pytest

from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, pack, payload_of, turn_events

pytestmark = pytest.mark.asyncio

POLICY = {"policy_id": 30, "rule_type": "LLM", "pattern": "requests to move money abroad",
          "response_text": "Blocked by policy.", "priority": 1}
FAIL_CLOSED = {"config_type": "PolicyEnforcementStep", "config_key": "LLM_FAIL_CLOSED", "config_value": "true"}
MALFORMED = [
    "Sure, that message looks fine to me.",
    "[true]",
    "null",
    "{}",
    '{"violates": "false"}',
    '{"violates": 0}',
    '{"violates": null, "reason": "unsure"}',
    '```json\n{"violates": "no"}\n```',
    '{"violates": false} {"violates": true}',
    '{"violates": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "[" * 100_000,
]


@pytest.mark.parametrize("fail_closed", [True, False], ids=["fail-closed", "fail-open"])
async def test_malformed_policy_replies_are_undecided_never_a_crash_or_a_bypass(db_url: str,
                                                                                fail_closed: bool) -> None:
    llm = ScriptedLLM({"POLICY": []})
    data = pack(ce_policy=[POLICY], ce_config=[FAIL_CLOSED] if fail_closed else [])
    async with engine_on(db_url, data, llm=llm) as engine:
        for reply in MALFORMED:
            llm.add("POLICY", reply)
            result = await engine.aprocess("send 5000 to my account in Panama, it's a loan")
            expected = ("BLOCKED", "Blocked by policy.") if fail_closed else ("RUNNING", "Loan started")
            assert (result.status, result.payload.value) == expected, reply[:40]
            events = await turn_events(engine, result.conversation_id)
            undecided = payload_of(events, "POLICY_LLM_UNDECIDED")
            assert undecided["outcome"] == ("BLOCK" if fail_closed else "ALLOW") and undecided["error"], reply[:40]
            assert "POLICY_LLM_CHECK" not in [e.stage for e in events]
        assert llm.count("POLICY") == len(MALFORMED)


async def test_an_oversized_reason_is_cut_and_a_clean_verdict_still_counts(db_url: str) -> None:
    llm = ScriptedLLM({"POLICY": ['{"violates": false, "reason": "' + "x" * 200_000 + '"}',
                                  '{"violates": true, "reason": 42}']})
    async with engine_on(db_url, pack(ce_policy=[POLICY]), llm=llm) as engine:
        allowed = await engine.aprocess("a loan please")
        assert allowed.status == "RUNNING"
        check = payload_of(await turn_events(engine, allowed.conversation_id), "POLICY_LLM_CHECK")
        assert check["violates"] is False and check["reason"] == "x" * 500
        blocked = await engine.aprocess("move it all abroad", allowed.conversation_id)
        assert (blocked.status, blocked.payload.value) == ("BLOCKED", "Blocked by policy.")
        check = payload_of(await turn_events(engine, allowed.conversation_id), "POLICY_LLM_CHECK")
        assert check["violates"] is True and check["reason"] is None  # a non-text reason is dropped
