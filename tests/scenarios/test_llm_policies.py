"""ce_policy rows of rule_type LLM: judged by the POLICY call site before any other LLM call."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.llm import ScriptedLLM
from convengine.llm.scripted import LlmCall
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio

ADVICE = {"policy_id": 20, "rule_type": "LLM", "pattern": "personal investment advice",
          "response_text": "I can't give investment advice.", "priority": 10}
FAIL_CLOSED = {"config_type": "PolicyEnforcementStep", "config_key": "LLM_FAIL_CLOSED", "config_value": "true"}


def policy_pack(*policies: dict[str, Any], fail_closed: bool = False) -> dict[str, Any]:
    return pack(ce_policy=list(policies) or [ADVICE], ce_config=[FAIL_CLOSED] if fail_closed else [],
                settings={"flow": {"dialogue-act": {"resolute": "LLM_ONLY"}}})


def judge(call: LlmCall) -> dict[str, Any]:
    asks_advice = "stocks" in call.user.rsplit("User message:", 1)[-1]
    return {"violates": asks_advice, "reason": "asks which stocks to buy" if asks_advice else "unrelated"}


def scripted(policy: Any = judge) -> ScriptedLLM:
    return ScriptedLLM({"POLICY": policy}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})


async def test_an_llm_policy_blocks_before_any_other_llm_call(db_url: str) -> None:
    llm = scripted()
    async with engine_on(db_url, policy_pack(), llm=llm) as engine:
        blocked = await engine.aprocess("which stocks should I buy for my pension?")
        assert (blocked.status, blocked.payload.value) == ("BLOCKED", "I can't give investment advice.")
        assert llm.sites() == ["POLICY"]
        call = llm.calls_to("POLICY")[0]
        assert "personal investment advice" in call.user and "which stocks" in call.user
        cid = blocked.conversation_id
        events = await turn_events(engine, cid)
        assert payload_of(events, "POLICY_LLM_CHECK") == {"policyId": 20, "violates": True, "callSite": "POLICY",
                                                          "reason": "asks which stocks to buy"}
        assert payload_of(events, "POLICY_BLOCK") == {"policyId": 20, "ruleType": "LLM",
                                                      "pattern": "personal investment advice"}
        allowed = await engine.aprocess("I need a loan", cid)
        assert (allowed.status, allowed.payload.value) == ("RUNNING", "Loan started")
        assert llm.sites() == ["POLICY", "POLICY", "DIALOGUE_ACT"]  # the policy check still comes first
        assert_in_order(await turn_stages(engine, cid), ["POLICY_LLM_CHECK", "DIALOGUE_ACT_CLASSIFIED"])


async def test_a_text_policy_of_higher_priority_blocks_without_asking_the_llm(db_url: str) -> None:
    llm = scripted()
    password = {"policy_id": 21, "rule_type": "CONTAINS", "pattern": "password", "response_text": "No secrets!",
                "priority": 1}
    async with engine_on(db_url, policy_pack(password, ADVICE), llm=llm) as engine:
        blocked = await engine.aprocess("my password and stocks")
        assert blocked.payload.value == "No secrets!" and llm.count() == 0


@pytest.mark.parametrize(("fail_closed", "status", "outcome"), [(True, "BLOCKED", "BLOCK"),
                                                                 (False, "RUNNING", "ALLOW")])
async def test_a_failing_policy_call_blocks_only_when_fail_closed(db_url: str, fail_closed: bool, status: str,
                                                                   outcome: str) -> None:
    llm = scripted([RuntimeError("provider down")])
    async with engine_on(db_url, policy_pack(fail_closed=fail_closed), llm=llm) as engine:
        result = await engine.aprocess("I need a loan")
        assert result.status == status
        events = await turn_events(engine, result.conversation_id)
        undecided = payload_of(events, "POLICY_LLM_UNDECIDED")
        assert (undecided["outcome"], undecided["failClosed"]) == (outcome, fail_closed)
        assert "provider down" in undecided["error"]
        if fail_closed:
            assert result.payload.value == "I can't give investment advice."
            assert payload_of(events, "POLICY_BLOCK")["failedClosed"] is True
        else:
            assert result.payload.value == "Loan started"


async def test_without_an_llm_an_llm_policy_is_undecided(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_policy=[ADVICE], ce_config=[FAIL_CLOSED])) as engine:
        result = await engine.aprocess("I need a loan")
        assert (result.status, result.payload.value) == ("BLOCKED", "I can't give investment advice.")
        undecided = payload_of(await turn_events(engine, result.conversation_id), "POLICY_LLM_UNDECIDED")
        assert undecided["error"] == "NO_LLM_CONFIGURED"
