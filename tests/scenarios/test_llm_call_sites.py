"""LLM call sites through Engine with ScriptedLLM: calls counted per call site and per turn."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, LlmError, PromptRenderError
from convengine.llm import Delay, ScriptedLLM
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio

LLM_PACK = {"flow": {"dialogue-act": {"resolute": "REGEX_THEN_LLM"}}}


def llm_pack(**tables: Any) -> dict[str, Any]:
    data = pack(**tables)
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "REGEX_THEN_LLM"
    return data


async def test_a_regex_greeting_makes_no_llm_call(db_url: str) -> None:
    llm = ScriptedLLM()
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        result = await engine.aprocess("hello")
        assert result.intent == "GREETING"
        assert llm.count() == 0


async def test_dialogue_act_by_llm_below_the_threshold_with_query_rewrite(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": [{"dialogueAct": "QUESTION", "confidence": 0.8},
                                        {"dialogueAct": "EDIT", "confidence": 0.9,
                                         "standaloneQuery": "change the loan amount"}],
                       "INTENT_AGENT": {"intent": None, "confidence": 0}})
    rules = [{"phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
              "match_pattern": "$[?(@.inputParams.dialogue_act_llm_candidate == 'EDIT')]",
              "action": "SET_INPUT_PARAM", "action_value": '{"saw_llm_edit": true}'}]
    async with engine_on(db_url, llm_pack(ce_rule=rules), llm=llm) as engine:
        first = await engine.aprocess("I need a loan")
        assert llm.count("DIALOGUE_ACT") == 1
        assert "conversation_history" not in llm.calls_to("DIALOGUE_ACT")[0].user  # no history yet: no rewrite
        second = await engine.aprocess("make it bigger", first.conversation_id)
        rewrite_call = llm.calls_to("DIALOGUE_ACT")[1]
        assert "I need a loan" in rewrite_call.user  # the rewrite prompt carries the history
        events = await turn_events(engine, first.conversation_id)
        classified = payload_of(events, "DIALOGUE_ACT_CLASSIFIED")
        assert (classified["dialogueAct"], classified["source"], classified["regexAct"]) == ("EDIT", "LLM", "NEW_REQUEST")
        assert classified["standaloneQuery"] == "change the loan amount"
        state = await engine.astate(second.conversation_id)
        assert state["input_params"]["saw_llm_edit"] is True
        assert_in_order([e.stage for e in events], ["DIALOGUE_ACT_LLM_INPUT", "LLM_CALL", "DIALOGUE_ACT_LLM_OUTPUT",
                                                    "DIALOGUE_ACT_CLASSIFIED", "RULE_MATCH (DialogueActStep)"])


async def test_affirm_by_regex_skips_the_llm_but_llm_only_always_asks(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": [{"dialogueAct": "AFFIRM", "confidence": 0.99}],
                       "INTENT_AGENT": {"intent": None, "confidence": 0}})
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        await engine.aprocess("yes")
        assert llm.count("DIALOGUE_ACT") == 0
    data = llm_pack()
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "LLM_ONLY"
    async with engine_on(db_url, data, llm=llm) as engine:
        await engine.aprocess("yes")
        assert llm.count("DIALOGUE_ACT") == 1


async def test_an_llm_reset_is_guarded_by_the_regex(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": {"dialogueAct": "RESET", "confidence": 0.9}})
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        result = await engine.aprocess("whatever about loans")
        events = await turn_events(engine, result.conversation_id)
        classified = payload_of(events, "DIALOGUE_ACT_CLASSIFIED")
        assert (classified["dialogueAct"], classified["source"]) == ("NEW_REQUEST", "REGEX_GUARD")


async def test_dialogue_act_falls_back_to_regex_when_the_llm_fails(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": [TimeoutError(), TimeoutError(), "not json at all"],
                       "INTENT_AGENT": {"intent": None, "confidence": 0}})
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        first = await engine.aprocess("I need a loan")
        second = await engine.aprocess("purple", first.conversation_id)
        for index in (0, 1):
            events = await turn_events(engine, first.conversation_id, index)
            assert payload_of(events, "DIALOGUE_ACT_CLASSIFIED")["source"] == "REGEX_FALLBACK"
            assert "DIALOGUE_ACT_LLM_ERROR" in [e.stage for e in events]
        assert second.intent == "LOAN"


AGENT_PACK_EXTRA = {
    "ce_intent": [{"intent_code": "BILLING", "description": "questions about a bill", "display_name": "Billing"}],
    "ce_response": [{"intent_code": "BILLING", "state_code": "ANY", "exact_text": "Billing help"},
                    {"intent_code": "LOAN", "state_code": "ANY", "exact_text": "Loan help"}],
    "ce_rule": [{"phase": "POST_AGENT_INTENT", "intent_code": "BILLING", "state_code": "ANY", "rule_type": "EXACT",
                 "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"post_intent_ran": true}'}],
}


async def test_the_intent_agent_accepts_a_confident_allowed_intent_and_runs_post_intent(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "BILLING", "confidence": 0.8,
                                         "intentScores": [{"intent": "BILLING", "score": 0.8},
                                                          {"code": "LOAN", "confidence": 0.3}]}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**AGENT_PACK_EXTRA), llm=llm) as engine:
        result = await engine.aprocess("why was I charged twice")
        assert (result.intent, result.payload.value) == ("BILLING", "Billing help")
        call = llm.calls_to("INTENT_AGENT")[0]
        assert "BILLING" in call.user and "LOAN" in call.user and "GREETING" in call.user  # allowed intents
        stages = await turn_stages(engine, result.conversation_id)
        assert_in_order(stages, ["INTENT_CLASSIFIER_NO_MATCH", "INTENT_AGENT_LLM_INPUT", "LLM_CALL",
                                 "INTENT_AGENT_LLM_OUTPUT", "INTENT_AGENT_SCORES", "INTENT_AGENT_ACCEPTED",
                                 "INTENT_RESOLVED_BY_AGENT", "RULE_MATCH (AgentIntentResolver)"])
        assert (await engine.astate(result.conversation_id))["input_params"]["post_intent_ran"] is True
        assert result.context.get("pending_clarification") is None


@pytest.mark.parametrize(("reply", "reason"), [
    ({"intent": "BILLING", "confidence": 0.4}, "LOW_CONFIDENCE"),
    ({"intent": "REFUNDS", "confidence": 0.9}, "INTENT_NOT_ALLOWED"),
    ({"intentScores": {"BILLING": 0.5}}, "LOW_CONFIDENCE"),
])
async def test_the_intent_agent_rejects_low_confidence_and_unknown_intents(db_url: str, reply: dict, reason: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [reply]}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**AGENT_PACK_EXTRA), llm=llm) as engine:
        result = await engine.aprocess("something vague")
        assert (result.intent, result.state) == ("UNKNOWN", "UNKNOWN")
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "INTENT_AGENT_REJECTED")["reason"] == reason
        assert "INTENT_RESOLVE_NO_CHANGE" in [e.stage for e in events]


async def test_min_confidence_comes_from_ce_config(db_url: str) -> None:
    extra = dict(AGENT_PACK_EXTRA)
    extra["ce_config"] = [{"config_type": "AgentIntentResolver", "config_key": "MIN_CONFIDENCE", "config_value": "0.3"}]
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "BILLING", "confidence": 0.4}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**extra), llm=llm) as engine:
        assert (await engine.aprocess("something vague")).intent == "BILLING"


async def test_a_collision_asks_and_the_next_turn_resolves_through_the_agent(db_url: str) -> None:
    llm = ScriptedLLM({
        "INTENT_AGENT": [
            {"intentScores": [{"intent": "BILLING", "score": 0.62}, {"intent": "LOAN", "score": 0.58}]},
            {"intent": "LOAN", "confidence": 0.9, "clarificationResolved": True},
        ],
        "INTENT_COLLISION": ["Is this about a bill or a loan?"],
    }, default={"dialogueAct": "ANSWER", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**AGENT_PACK_EXTRA), llm=llm) as engine:
        first = await engine.aprocess("about my payment")
        assert (first.intent, first.state) == ("BILLING", "INTENT_COLLISION")
        assert first.payload.value == "Is this about a bill or a loan?"
        assert first.context["pending_clarification"]["question"] == "Did you mean Billing or Loan?"
        stages = await turn_stages(engine, first.conversation_id)
        assert_in_order(stages, ["INTENT_AGENT_COLLISION", "INTENT_AGENT_NEEDS_CLARIFICATION",
                                 "INTENT_COLLISION_DETECTED", "INTENT_COLLISION_RESOLVED", "ASSISTANT_OUTPUT"])
        second = await engine.aprocess("the second option", first.conversation_id)
        assert (second.intent, second.payload.value) == ("LOAN", "Loan help")
        agent_call = llm.calls_to("INTENT_AGENT")[1]
        assert "Did you mean Billing or Loan?" in agent_call.user  # the pending question is carried over
        assert second.context.get("pending_clarification") is None  # cleared once resolved


async def test_clarification_is_suppressed_for_schema_driven_intents(db_url: str) -> None:
    extra = dict(AGENT_PACK_EXTRA)
    extra["ce_output_schema"] = [{"intent_code": "BILLING", "state_code": "ANY", "priority": 1,
                                  "json_schema": {"type": "object", "properties": {"invoice": {"type": "string"}}}}]
    llm = ScriptedLLM({"INTENT_AGENT": [{"intentScores": {"BILLING": 0.7, "LOAN": 0.65}}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**extra), llm=llm) as engine:
        result = await engine.aprocess("about my payment")
        assert (result.intent, result.state) == ("BILLING", "UNKNOWN")
        assert "INTENT_AGENT_CLARIFICATION_SUPPRESSED_SCHEMA_FLOW" in await turn_stages(engine, result.conversation_id)


async def test_the_classifier_path_clears_a_pending_clarification(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [{"intentScores": {"BILLING": 0.6, "LOAN": 0.55}}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(**AGENT_PACK_EXTRA), llm=llm) as engine:
        first = await engine.aprocess("about my payment")
        assert first.context["pending_clarification"]
        second = await engine.aprocess("a loan please", first.conversation_id)
        assert second.intent == "LOAN" and second.context.get("pending_clarification") is None


async def test_unscripted_calls_name_the_call_site(db_url: str) -> None:
    llm = ScriptedLLM()
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        with pytest.raises(LlmError, match="no reply for call site INTENT_AGENT") as info:
            await engine.aprocess("hmm")  # DIALOGUE_ACT unscripted falls back to regex; the agent then fails
        assert not info.value.recoverable


LLM_FAILURES = [
    (TimeoutError(), ErrorCode.LLM_TIMEOUT),
    (ConnectionRefusedError("connection refused"), ErrorCode.LLM_CALL_FAILED),
    ("{not json", ErrorCode.LLM_INVALID_RESPONSE),
    ({"answer": 42}, ErrorCode.LLM_SCHEMA_VIOLATION),
]


@pytest.mark.parametrize(("reply", "code"), LLM_FAILURES)
async def test_llm_failures_are_recoverable_and_leave_the_conversation_unchanged(db_url: str, reply: Any,
                                                                                 code: ErrorCode) -> None:
    responses = [{"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "JSON",
                  "json_schema": {"type": "object", "required": ["summary"],
                                  "properties": {"summary": {"type": "string"}}}}]
    templates = [{"intent_code": "LOAN", "state_code": "START", "output_format": "JSON",
                  "system_prompt": "Summarise", "user_prompt": "{{user_input}}"}]
    data = llm_pack(ce_response=responses, ce_prompt_template=templates)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    llm = ScriptedLLM({"RESPONSE_JSON": [reply]}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, data, llm=llm, settings={"llm": {"max_retries": 0}}) as engine:
        first = await engine.aprocess("hello")
        before = await engine.astate(first.conversation_id)
        with pytest.raises(LlmError) as info:
            await engine.aprocess("loan", first.conversation_id)
        assert info.value.code == code and info.value.recoverable
        assert info.value.details["callSite"] == "RESPONSE_JSON"
        after = await engine.astate(first.conversation_id)
        assert {k: after[k] for k in ("intent", "state", "turn", "context")} == \
               {k: before[k] for k in ("intent", "state", "turn", "context")}
        stages = [e.stage for e in await engine.aaudit(first.conversation_id)]
        assert "LLM_CALL_ERROR" in stages and stages[-1] == "ENGINE_KNOWN_FAILURE"


async def test_a_slow_model_times_out(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [Delay(2.0, {"intent": "LOAN", "confidence": 1})]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    data = llm_pack()
    data["settings"]["llm"] = {"timeout-s": 0.2, "max-retries": 0}
    async with engine_on(db_url, data, llm=llm) as engine:
        with pytest.raises(LlmError) as info:
            await engine.aprocess("hmm")
        assert info.value.code == ErrorCode.LLM_TIMEOUT and "timed out after 0.2s" in info.value.message


async def test_transient_failures_are_retried(db_url: str) -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [ConnectionResetError("reset"), {"intent": "LOAN", "confidence": 0.9}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, llm_pack(), llm=llm) as engine:
        result = await engine.aprocess("hmm")
        assert result.intent == "LOAN"
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "LLM_CALL_ERROR")["willRetry"] is True
        assert [e.payload["attempt"] for e in events if e.stage == "LLM_CALL" and e.payload["callSite"] == "INTENT_AGENT"] == [2]


async def test_unresolved_prompt_variables_name_the_variable_and_template(db_url: str) -> None:
    responses = [{"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "TEXT"}]
    templates = [{"template_id": 77, "intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
                  "system_prompt": "Be nice", "user_prompt": "Customer {{customer.name}} said {{user_input}}"}]
    data = llm_pack(ce_response=responses, ce_prompt_template=templates)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    async with engine_on(db_url, data, llm=ScriptedLLM(default="x")) as engine:
        with pytest.raises(PromptRenderError) as info:
            await engine.aprocess("loan")
        assert info.value.code == ErrorCode.UNRESOLVED_PROMPT_VARIABLE
        assert "'customer.name'" in info.value.message and "ce_prompt_template[77].user_prompt" in info.value.message


async def test_llm_calls_are_audited_and_logged_to_ce_llm_call_log(db_url: str) -> None:
    import sqlalchemy as sa

    from convengine.db import create_sync_engine, parse_database_url

    data = llm_pack()
    data["settings"]["llm"] = {"log-calls": True}
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "LOAN", "confidence": 0.9}]},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("hmm")
        calls = [e.payload for e in await turn_events(engine, result.conversation_id) if e.stage == "LLM_CALL"]
        assert [c["callSite"] for c in calls] == ["DIALOGUE_ACT", "INTENT_AGENT"]
        assert all(c["latencyMs"] >= 0 and c["model"] == "scripted" for c in calls)
    db = create_sync_engine(parse_database_url(db_url))
    with db.connect() as conn:
        rows = conn.execute(sa.text("SELECT user_context, success, conversation_id FROM ce_llm_call_log "
                                    "ORDER BY llm_call_id")).all()
    db.dispose()
    assert [(r[0], bool(r[1])) for r in rows] == [("DIALOGUE_ACT", True), ("INTENT_AGENT", True)]
    assert str(rows[0][2]) == result.conversation_id
