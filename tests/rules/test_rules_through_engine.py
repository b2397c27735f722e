"""Rules as a pack author sees them through Engine, on both backends: disabled rows, rows without a
scope, phases handing values on within one turn, JSON payload facts after the response, a host
action that fails, and rule types the host did not register."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError, ErrorCode, RuleError
from tests.helpers import engine_on, pack, payload_of, turn_events, turn_stages


def rule(action: str, value: str | None, **row: Any) -> dict[str, Any]:
    return {"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
            "match_pattern": "ANY", "action": action, "action_value": value, **row}


async def test_a_disabled_rule_is_not_a_candidate_and_an_unscoped_rule_applies_everywhere(db_url: str) -> None:
    rules = [rule("SET_INPUT_PARAM", "disabled_ran", rule_id=1, enabled=False),
             {"rule_id": 2, "rule_type": "EXACT", "match_pattern": "ANY", "action": "SET_INPUT_PARAM",
              "action_value": '{"unscoped_ran": true}'}]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        loan = await engine.aprocess("a loan")
        greeting = await engine.aprocess("hello")
        for result in (loan, greeting):
            params = (await engine.astate(result.conversation_id))["input_params"]
            assert params.get("unscoped_ran") is True and "disabled_ran" not in params
            events = await turn_events(engine, result.conversation_id)
            assert [e.payload["ruleId"] for e in events if e.stage == "RULE_MATCH (RulesStep)"] == [2]
            assert not [e for e in events if e.stage.startswith("RULE_NO_MATCH") and e.payload.get("ruleId") == 1]


async def test_a_later_phase_reads_what_an_earlier_phase_set_in_the_same_turn(db_url: str) -> None:
    rules = [
        rule("SET_INPUT_PARAM", '{"shouted": true}', phase="POST_DIALOGUE_ACT", intent_code="ANY", state_code="ANY",
             rule_type="REGEX", match_pattern=r"!{2,}"),
        rule("SET_INTENT", "GREETING", phase="POST_INTENT", rule_type="JSON_PATH",
             match_pattern="$[?(@.inputParams.shouted == true)]"),
    ]
    responses = [{"intent_code": "GREETING", "state_code": "START", "exact_text": "Calm down, {{intent}}", "priority": 1}]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=responses)) as engine:
        calm = await engine.aprocess("a loan please")
        assert (calm.intent, calm.text) == ("LOAN", "Loan started")
        loud = await engine.aprocess("A LOAN NOW!!!")
        assert (loud.intent, loud.state, loud.text) == ("GREETING", "START", "Calm down, GREETING")
        intent = payload_of(await turn_events(engine, loud.conversation_id), "SET_INTENT")
        assert (intent["fromIntent"], intent["toIntent"]) == ("LOAN", "GREETING")


async def test_post_response_rules_see_a_json_payload_as_it_is(db_url: str) -> None:
    responses = [{"intent_code": "LOAN", "state_code": "START", "output_format": "JSON", "priority": 1,
                  "exact_text": '{"status": "{{status}}", "amount": {{amount}}}'}]
    rules = [rule("SET_STATE", "REVIEW", phase="POST_RESPONSE_RESOLUTION", rule_type="JSON_PATH",
                  match_pattern="$[?(@.payload.status == 'open' && @.payload.amount > 1000)]")]
    review = [{"intent_code": "LOAN", "state_code": "REVIEW", "exact_text": "Under review"}]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=responses + review)) as engine:
        small = await engine.aprocess("a loan", input_params={"status": "open", "amount": 500})
        assert (small.state, small.payload.value) == ("START", {"status": "open", "amount": 500})
        large = await engine.aprocess("a loan", input_params={"status": "open", "amount": 5000})
        assert (large.state, large.payload.value) == ("REVIEW", {"status": "open", "amount": 5000})
        assert (await engine.aprocess("and now?", large.conversation_id)).text == "Under review"


async def test_a_failing_host_action_fails_the_turn_naming_the_rule_and_changes_nothing(db_url: str) -> None:
    def lookup(rule_row: Any, session: Any, env: Any) -> dict[str, Any]:
        session.params["half_done"] = True
        raise KeyError("customer")

    rules = [rule("LOOKUP", None, rule_id=42, match_pattern="a loan")]
    async with engine_on(db_url, pack(ce_rule=rules), rule_actions={"lookup": lookup}) as engine:
        first = await engine.aprocess("hello")
        before = await engine.astate(first.conversation_id)
        with pytest.raises(RuleError) as info:
            await engine.aprocess("a loan", first.conversation_id)
        assert info.value.code is ErrorCode.RULE_EVALUATION_FAILED
        assert info.value.message == "ce_rule[42] action LOOKUP failed: 'customer'"
        assert info.value.details["ruleId"] == 42
        after = await engine.astate(first.conversation_id)
        assert {k: after[k] for k in ("intent", "state", "turn", "input_params")} == \
               {k: before[k] for k in ("intent", "state", "turn", "input_params")}
        stages = await turn_stages(engine, first.conversation_id)
        assert stages[-2:] == ["STEP_ERROR", "ENGINE_KNOWN_FAILURE"]
        assert (await engine.aprocess("hello again", first.conversation_id)).turn == 2  # the conversation goes on


async def test_a_rule_type_or_action_the_host_did_not_register_is_refused_at_open(db_url: str) -> None:
    rows = [rule("SET_INPUT_PARAM", "x", rule_id=7, rule_type="LONGER_THAN", match_pattern="5"),
            rule("SHOUT", None, rule_id=8)]
    with pytest.raises(ConfigValidationError) as info:
        async with engine_on(db_url, pack(ce_rule=rows)):
            pass
    found = [str(v) for v in info.value.violations]
    assert any(v.startswith("ce_rule[7].rule_type: unknown rule type 'LONGER_THAN'") for v in found), found
    assert any(v.startswith("ce_rule[8].action: unknown action 'SHOUT'") for v in found), found
    async with engine_on(db_url, pack(ce_rule=rows), rule_types={"longer_than": lambda r, s: True},
                         rule_actions={"shout": lambda r, s, e: {"ruleId": r.rule_id}}) as engine:
        result = await engine.aprocess("a loan")
        assert "SHOUT" in await turn_stages(engine, result.conversation_id)
