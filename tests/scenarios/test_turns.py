"""Deterministic turns through Engine: greeting, unknown input, resets, response selection."""

from __future__ import annotations

import pytest

from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


async def test_greeting_is_classified_and_answered(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        result = await engine.aprocess("hello there")
        assert (result.intent, result.state) == ("GREETING", "IDLE")
        assert (result.payload.type, result.payload.value) == ("TEXT", "Hello there")
        assert result.turn == 1
        stages = await turn_stages(engine, result.conversation_id)
        assert_in_order(stages, [
            "USER_INPUT", "DIALOGUE_ACT_CLASSIFIED", "INTERACTION_POLICY_DECIDED", "INTENT_RESOLVE_START",
            "INTENT_CLASSIFICATION_MATCHED", "INTENT_RESOLVED_BY_CLASSIFIER", "RULE_NO_MATCH (IntentResolutionStep Classifier)",
            "RULE_NO_MATCH (RulesStep)", "RESOLVE_RESPONSE", "RESPONSE_EXACT", "ASSISTANT_OUTPUT", "MEMORY_UPDATED",
            "ENGINE_RETURN", "PIPELINE_TIMING"])
        history = await engine.ahistory(result.conversation_id)
        assert [h["user_input"] for h in history] == ["hello there"]
        assert history[0]["assistant_output"] == {"type": "TEXT", "value": "Hello there"}


async def test_every_step_is_entered_and_exited_with_durations(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        result = await engine.aprocess("hello")
        events = await turn_events(engine, result.conversation_id)
        entered = [e.payload["step"] for e in events if e.stage == "STEP_ENTER"]
        exited = [e.payload["step"] for e in events if e.stage == "STEP_EXIT"]
        assert entered == exited
        assert entered[0] == "load_or_create_conversation" and entered[-1] == "pipeline_end_guard"
        skipped = [e.payload["step"] for e in events if e.stage == "STEP_SKIPPED"]
        assert {"schema_extraction", "auto_advance", "mcp_planner", "tool_orchestration"} <= set(skipped)
        assert all(e.payload["durationMs"] >= 0 for e in events if e.stage == "STEP_EXIT")
        timing = payload_of(events, "PIPELINE_TIMING")
        assert "intent_resolution=" in timing["steps"] and timing["totalMs"] > 0


async def test_unknown_input_keeps_the_current_intent_and_state(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("I need a loan")
        assert (first.intent, first.state) == ("LOAN", "START")
        second = await engine.aprocess("purple elephants", first.conversation_id)
        assert (second.intent, second.state) == ("LOAN", "START")
        assert second.payload.value == "Loan started"
        assert second.turn == 2
        stages = await turn_stages(engine, first.conversation_id)
        assert_in_order(stages, ["INTENT_CLASSIFIER_NO_MATCH", "INTENT_AGENT_SKIPPED", "INTENT_RESOLVE_NO_CHANGE"])


async def test_an_unknown_first_message_gets_the_unknown_response(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        result = await engine.aprocess("qwerty")
        assert (result.intent, result.state, result.payload.value) == ("UNKNOWN", "UNKNOWN", "Sorry?")


RESET_TRIGGERS = [
    ({"reset": True}, "hello", "INPUT_PARAM:reset"),
    ({"input_params": {"reset": "true"}}, "hello", "INPUT_PARAM:reset"),
    ({"input_params": {"restart": 1}}, "hello", "INPUT_PARAM:restart"),
    ({"input_params": {"conversation_reset": "yes"}}, "hello", "INPUT_PARAM:conversation_reset"),
    ({}, "reset", "USER_TEXT_COMMAND"),
    ({}, "RESTART", "USER_TEXT_COMMAND"),
    ({}, "/reset", "USER_TEXT_COMMAND"),
    ({}, " /restart ", "USER_TEXT_COMMAND"),
    ({}, "start over", "USER_TEXT_COMMAND"),
]


@pytest.mark.parametrize(("kwargs", "text", "reason"), RESET_TRIGGERS)
async def test_every_reset_trigger_wipes_and_processing_continues(db_url: str, kwargs: dict, text: str,
                                                                  reason: str) -> None:
    rules = [{"phase": "POST_INTENT", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"sticky_flag": "kept"}'}]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        first = await engine.aprocess("loan please", input_params={"customer": "c-1"})
        assert first.intent == "LOAN"
        assert (await engine.astate(first.conversation_id))["input_params"] == {"customer": "c-1", "sticky_flag": "kept"}
        result = await engine.aprocess(text, first.conversation_id, **kwargs)
        events = await turn_events(engine, first.conversation_id)
        reset = payload_of(events, "CONVERSATION_RESET")
        assert reset["reason"] == reason
        assert (reset["intent"], reset["state"]) == ("LOAN", "START")
        state = await engine.astate(first.conversation_id)
        assert state["input_params"] == {}
        expected = ("GREETING", "IDLE") if text == "hello" else ("UNKNOWN", "UNKNOWN")
        assert (result.intent, result.state) == expected  # the same text is processed after the wipe


async def test_reset_by_resolved_intent_skips_to_rules(db_url: str) -> None:
    extra = {"ce_intent": [{"intent_code": "RESET_SESSION", "description": "start again"}],
             "ce_intent_classifier": [{"intent_code": "RESET_SESSION", "rule_type": "STARTS_WITH",
                                       "pattern": "forget it", "priority": 0}]}
    async with engine_on(db_url, pack(**extra)) as engine:
        first = await engine.aprocess("loan please")
        result = await engine.aprocess("forget it all", first.conversation_id)
        assert (result.intent, result.state) == ("UNKNOWN", "UNKNOWN")
        events = await turn_events(engine, first.conversation_id)
        assert payload_of(events, "CONVERSATION_RESET")["reason"] == "INTENT_RESOLVED_RESET"
        entered = [e.payload["step"] for e in events if e.stage == "STEP_ENTER"]
        assert "schema_extraction" not in entered and "pending_action" not in entered
        assert entered.index("rules") == entered.index("reset_resolved_intent") + 1


async def test_custom_reset_intent_codes_from_ce_config(db_url: str) -> None:
    extra = {"ce_intent": [{"intent_code": "WIPE", "description": "wipe"}],
             "ce_intent_classifier": [{"intent_code": "WIPE", "rule_type": "EXACT", "pattern": "wipe it",
                                       "priority": 0}],
             "ce_config": [{"config_type": "ResetResolvedIntentStep", "config_key": "RESET_INTENT_CODES",
                            "config_value": "RESET_SESSION, WIPE"}]}
    async with engine_on(db_url, pack(**extra)) as engine:
        result = await engine.aprocess("wipe it")
        assert result.intent == "UNKNOWN"
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "CONVERSATION_RESET")["matchedResetIntentCodes"] == ["RESET_SESSION", "WIPE"]


async def test_response_selection_follows_convengine_scores(db_url: str) -> None:
    responses = [
        {"response_id": 101, "intent_code": "LOAN", "state_code": "ANY", "exact_text": "intent+ANY", "priority": 1},
        {"response_id": 102, "state_code": "START", "exact_text": "null intent + exact state", "priority": 1},
        {"response_id": 103, "intent_code": "LOAN", "state_code": "START", "exact_text": "exact+exact p50",
         "priority": 50},
        {"response_id": 104, "intent_code": "LOAN", "state_code": "START", "exact_text": "exact+exact p20",
         "priority": 20},
    ]
    data = pack(ce_response=responses)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "exact+exact p20"  # 1000+100-20 beats 1000+100-50, 1000+1-1, 100+10-1
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "RESOLVE_RESPONSE")["responseId"] == 104


async def test_null_intent_exact_state_beats_intent_with_any_state(db_url: str) -> None:
    responses = [
        {"intent_code": "LOAN", "state_code": "ANY", "exact_text": "intent+ANY"},
        {"state_code": "START", "exact_text": "global for START"},
    ]
    data = pack(ce_response=responses)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    async with engine_on(db_url, data) as engine:
        assert (await engine.aprocess("loan")).payload.value == "global for START"


async def test_a_missing_response_fails_the_turn_with_a_clear_error(db_url: str) -> None:
    from convengine.catalog.errors import ResponseMappingNotFoundError

    data = pack()
    data["ce_response"] = [r for r in data["ce_response"] if r.get("state_code") not in ("ANY", "START")]
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("hello")
        with pytest.raises(ResponseMappingNotFoundError, match="intent=LOAN, state=START") as info:
            await engine.aprocess("loan", first.conversation_id)
        assert info.value.code.value == "RESPONSE_MAPPING_NOT_FOUND"
        state = await engine.astate(first.conversation_id)
        assert (state["intent"], state["state"], state["turn"]) == ("GREETING", "IDLE", 1)
        stages = [e.stage for e in await engine.aaudit(first.conversation_id)]
        assert "RESPONSE_MAPPING_NOT_FOUND" in stages and "ENGINE_KNOWN_FAILURE" in stages


async def test_exact_templates_render_params_context_and_json(db_url: str) -> None:
    rules = [{"intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT", "match_pattern": "ANY",
              "action": "SET_INPUT_PARAM", "action_value": '{"amount": 5000, "terms": {"months": 12}}'}]
    data = pack(ce_rule=rules)
    for row in data["ce_response"]:
        if row.get("exact_text") == "Loan started":
            row["exact_text"] = "Loan of {{amount}} for {{inputParams.terms.months}} months; terms={{terms}}{{missing}}"
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == 'Loan of 5000 for 12 months; terms={"months": 12}'


async def test_json_exact_responses_return_json_payloads(db_url: str) -> None:
    data = pack()
    for row in data["ce_response"]:
        if row.get("exact_text") == "Hello there":
            row.update(output_format="JSON", exact_text='{"greeting": "hi", "intent": "{{intent}}"}')
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess("hello")
        assert (result.payload.type, result.payload.value) == ("JSON", {"greeting": "hi", "intent": "GREETING"})
        assert (await engine.ahistory(result.conversation_id))[0]["assistant_output"] == {"greeting": "hi",
                                                                                          "intent": "GREETING"}


async def test_a_policy_block_stops_the_turn_before_any_llm_call(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    policies = [{"policy_id": 9, "rule_type": "REGEX", "pattern": r"\bpassword\b", "response_text": "No secrets!",
                 "priority": 1}]
    data = pack(ce_policy=policies, settings={"flow": {"dialogue-act": {"resolute": "LLM_ONLY"}}})
    llm = ScriptedLLM(default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(db_url, data, llm=llm) as engine:
        first = await engine.aprocess("I need a loan")
        calls_before = llm.count()
        blocked = await engine.aprocess("my password is hunter2", first.conversation_id)
        assert llm.count() == calls_before  # zero LLM calls in the blocked turn
        assert (blocked.intent, blocked.state, blocked.status) == ("LOAN", "START", "BLOCKED")
        assert (blocked.payload.type, blocked.payload.value) == ("TEXT", "No secrets!")
        stages = await turn_stages(engine, first.conversation_id)
        assert_in_order(stages, ["USER_INPUT", "POLICY_BLOCK", "ENGINE_RETURN", "PIPELINE_TIMING"])
        assert "DIALOGUE_ACT_CLASSIFIED" not in stages and "INTENT_RESOLVE_START" not in stages
        events = await turn_events(engine, first.conversation_id)
        assert payload_of(events, "POLICY_BLOCK") == {"policyId": 9, "ruleType": "REGEX", "pattern": r"\bpassword\b"}
        history = await engine.ahistory(first.conversation_id)
        assert [h["user_input"] for h in history][-1] == "my password is hunter2"  # the turn is recorded
        state = await engine.astate(first.conversation_id)
        assert all("password" not in t["user"] for t in state["recent_turns"])  # but kept out of prompts
        after = await engine.aprocess("loan again", first.conversation_id)
        assert after.status == "RUNNING"
        rewrite = llm.calls_to("DIALOGUE_ACT")[-1]
        assert "password" not in rewrite.user


@pytest.mark.parametrize(("rule_type", "pattern", "text", "blocked"), [
    ("CONTAINS", "ssn", "my SSN is 123", True),
    ("STARTS_WITH", "drop", "  DROP table", True),
    ("STARTS_WITH", "drop", "please drop it", False),
    ("EXACT", "stop", " Stop ", True),
    ("EXACT", "stop", "stop it", False),
    ("REGEX", r"\d{3}-\d{2}-\d{4}", "it is 123-45-6789", True),
])
async def test_policy_match_types(db_url: str, rule_type: str, pattern: str, text: str, blocked: bool) -> None:
    data = pack(ce_policy=[{"rule_type": rule_type, "pattern": pattern, "response_text": "blocked"}])
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess(text)
        assert (result.status == "BLOCKED") is blocked


async def test_policies_apply_in_priority_order(db_url: str) -> None:
    data = pack(ce_policy=[{"rule_type": "CONTAINS", "pattern": "bad", "response_text": "second", "priority": 20},
                           {"rule_type": "CONTAINS", "pattern": "bad", "response_text": "first", "priority": 5}])
    async with engine_on(db_url, data) as engine:
        assert (await engine.aprocess("bad words")).payload.value == "first"
