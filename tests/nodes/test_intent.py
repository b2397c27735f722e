"""intent_resolution, the intent agent, the collision answer and fallback_intent_state.

Classifier rows and the agent's replies decide the intent; a slot schema being collected keeps it
(unless the user asks to switch); what the agent says is untrusted and checked."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import names
from convengine.llm import ScriptedLLM
from convengine.nodes.common import Step
from convengine.nodes.intent_agent import parse_answer, parse_scores
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

BILLING = {"ce_intent": [{"intent_code": "BILLING", "description": "bills", "display_name": "Billing"}],
           "ce_response": [{"intent_code": "BILLING", "state_code": "ANY", "exact_text": "Billing help"}]}


# --- classifiers ----------------------------------------------------------------------------------


async def test_classifiers_of_two_intents_matching_is_a_collision_that_changes_nothing(sqlite_db_url: str) -> None:
    classifiers = [{"intent_code": "BILLING", "state_code": "OPEN", "rule_type": "CONTAINS", "pattern": "payment",
                    "priority": 3}]
    async with engine_on(sqlite_db_url, pack(ce_intent_classifier=classifiers, **BILLING)) as engine:
        result = await engine.aprocess("loan payment")
        events = await turn_events(engine, result.conversation_id)
    assert (result.intent, result.state) == ("UNKNOWN", "UNKNOWN")
    collision = payload_of(events, "INTENT_CLASSIFIER_COLLISION")
    assert collision["matchedIntents"] == ["LOAN", "BILLING"]  # by classifier priority
    assert_in_order([e.stage for e in events], ["INTENT_CLASSIFIER_COLLISION", "INTENT_AGENT_SKIPPED",
                                                "INTENT_RESOLVE_NO_CHANGE"])


async def test_the_agent_is_told_the_colliding_intents(sqlite_db_url: str) -> None:
    classifiers = [{"intent_code": "BILLING", "rule_type": "CONTAINS", "pattern": "payment", "priority": 3}]
    llm = ScriptedLLM({"INTENT_AGENT": [{"intent": "BILLING", "confidence": 0.9}]})
    async with engine_on(sqlite_db_url, pack(ce_intent_classifier=classifiers, **BILLING), llm=llm) as engine:
        result = await engine.aprocess("loan payment")
    assert result.intent == "BILLING"
    assert 'Collision candidates: ["LOAN", "BILLING"]' in llm.calls_to("INTENT_AGENT")[0].user


async def test_several_rows_of_one_intent_are_no_collision_and_the_first_by_priority_sets_the_state(
        sqlite_db_url: str) -> None:
    classifiers = [{"intent_code": "LOAN", "state_code": "AMOUNT", "rule_type": "CONTAINS", "pattern": "borrow",
                    "priority": 0}]
    async with engine_on(sqlite_db_url, pack(ce_intent_classifier=classifiers)) as engine:
        result = await engine.aprocess("borrow for a loan")
        matched = payload_of(await turn_events(engine, result.conversation_id), "INTENT_CLASSIFICATION_MATCHED")
    assert (result.intent, result.state) == ("LOAN", "AMOUNT")
    assert (matched["state"], matched["ruleType"]) == ("AMOUNT", "CONTAINS")


async def test_disabled_rows_and_rows_of_disabled_intents_never_match(sqlite_db_url: str) -> None:
    data = pack(ce_intent=[{"intent_code": "CARDS", "description": "cards", "enabled": False}],
                ce_intent_classifier=[
                    {"intent_code": "CARDS", "rule_type": "CONTAINS", "pattern": "card", "priority": 0},
                    {"intent_code": "LOAN", "rule_type": "CONTAINS", "pattern": "credit", "priority": 0,
                     "enabled": False}])
    async with engine_on(sqlite_db_url, data) as engine:
        result = await engine.aprocess("credit card")
        stages = await turn_stages(engine, result.conversation_id)
    assert result.intent == "UNKNOWN"
    assert "INTENT_CLASSIFIER_NO_MATCH" in stages and "INTENT_CLASSIFIER_COLLISION" not in stages


async def test_a_later_unmatched_message_keeps_the_intent(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello")
        second = await engine.aprocess("blue sky", first.conversation_id)
    assert (second.intent, second.state) == ("GREETING", "IDLE")


# --- a slot schema being collected keeps the intent ------------------------------------------------

SCHEMA_TABLES: dict[str, Any] = {
    "ce_output_schema": [{"schema_id": 7, "intent_code": "LOAN", "state_code": "START", "priority": 1,
                          "json_schema": {"type": "object", "required": ["amount"],
                                          "properties": {"amount": {"type": "number"}}}}],
    "ce_prompt_template": [{"template_id": 70, "intent_code": "LOAN", "state_code": "START",
                            "output_format": "SCHEMA_JSON", "system_prompt": "Extract", "user_prompt": "{{user_input}}"}],
}


def sticky_pack(sticky: bool | None = None) -> dict[str, Any]:
    config = [] if sticky is None else [{"config_type": "IntentResolutionStep", "config_key": "STICKY_INTENT",
                                         "config_value": str(sticky).lower()}]
    return pack(ce_config=config, **SCHEMA_TABLES)


async def test_an_incomplete_schema_keeps_its_intent_against_other_classifiers(db_url: str) -> None:
    async with engine_on(db_url, sticky_pack(), llm=ScriptedLLM(default={})) as engine:
        first = await engine.aprocess("loan")
        assert first.context["intent_lock"]["locked"] is True
        second = await engine.aprocess("hello", first.conversation_id)
        events = await turn_events(engine, first.conversation_id)
    assert (second.intent, second.state) == ("LOAN", "START")
    assert payload_of(events, "INTENT_RESOLVE_SKIPPED_STICKY_INTENT")["reason"] == "SCHEMA_INCOMPLETE"
    assert "INTENT_CLASSIFICATION_MATCHED" not in [e.stage for e in events]


@pytest.mark.parametrize(("text", "params", "signal"), [
    ("hello", {"force_intent_resolution": "true"}, "INPUT_PARAM:force_intent_resolution"),
    ("hello, switch intent please", {}, "SWITCH_PHRASE"),
])
async def test_the_user_can_switch_away_from_a_sticky_intent(db_url: str, text: str, params: dict[str, Any],
                                                            signal: str) -> None:
    async with engine_on(db_url, sticky_pack(), llm=ScriptedLLM(default={})) as engine:
        first = await engine.aprocess("loan")
        second = await engine.aprocess(text, first.conversation_id, input_params=params)
        events = await turn_events(engine, first.conversation_id)
    assert (second.intent, second.state) == ("GREETING", "IDLE")
    assert payload_of(events, "INTENT_RESOLVE_FORCED") == {"signal": signal, "intent": "LOAN"}


async def test_without_sticky_intent_a_switch_request_does_not_escape_the_schema(db_url: str) -> None:
    async with engine_on(db_url, sticky_pack(False), llm=ScriptedLLM(default={})) as engine:
        first = await engine.aprocess("loan")
        second = await engine.aprocess("hello", first.conversation_id,
                                       input_params={"force_intent_resolution": True})
        stages = await turn_stages(engine, first.conversation_id)
    assert second.intent == "LOAN"
    assert "INTENT_RESOLVE_SKIPPED_SCHEMA_COLLECTION" in stages and "INTENT_RESOLVE_FORCED" not in stages


# --- the intent agent -----------------------------------------------------------------------------


def agent(*replies: Any, **sites: Any) -> ScriptedLLM:
    return ScriptedLLM({"INTENT_AGENT": list(replies), **sites})


async def test_a_state_the_pack_does_not_know_is_ignored(db_url: str) -> None:
    llm = agent({"intent": "LOAN", "state": "NOWHERE", "confidence": 0.9},
                {"intent": "LOAN", "state": "start", "confidence": 0.9})
    async with engine_on(db_url, pack(**BILLING), llm=llm) as engine:
        first = await engine.aprocess("money please")
        assert (first.intent, first.state) == ("LOAN", "UNKNOWN")
        assert payload_of(await turn_events(engine, first.conversation_id), "INTENT_AGENT_STATE_IGNORED") == \
            {"state": "NOWHERE", "reason": "UNKNOWN_STATE"}
        second = await engine.aprocess("money please", first.conversation_id)
    assert (second.intent, second.state, second.payload.value) == ("LOAN", "START", "Loan started")  # upper-cased


async def test_a_clarification_asks_the_question_and_runs_no_post_intent_rules(sqlite_db_url: str) -> None:
    rules = [{"phase": "POST_AGENT_INTENT", "intent_code": "ANY", "state_code": "ANY", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"post_intent": true}'}]
    llm = agent({"intent": "BILLING", "confidence": 0.4, "needsClarification": True,
                 "clarificationQuestion": "  Is it about last month's bill?  "})
    async with engine_on(sqlite_db_url, pack(ce_rule=rules, **BILLING), llm=llm) as engine:
        result = await engine.aprocess("that charge")
        state = await engine.astate(result.conversation_id)
        events = await turn_events(engine, result.conversation_id)
    assert result.intent == "BILLING"
    assert result.context["pending_clarification"] == {"question": "Is it about last month's bill?", "reason": "AGENT",
                                                       "candidates": []}
    assert "post_intent" not in state["input_params"]
    assert payload_of(events, "INTENT_RESOLVED_BY_AGENT")["resolvedIntent"] == "BILLING"


async def test_a_clarification_without_a_question_is_rejected(sqlite_db_url: str) -> None:
    llm = agent({"intent": "BILLING", "confidence": 0.9, "needsClarification": True})
    async with engine_on(sqlite_db_url, pack(**BILLING), llm=llm) as engine:
        result = await engine.aprocess("that charge")
        events = await turn_events(engine, result.conversation_id)
    assert result.intent == "UNKNOWN" and "pending_clarification" not in result.context
    assert payload_of(events, "INTENT_AGENT_REJECTED")["reason"] == "needsClarification without question"


async def test_close_scores_ask_with_the_models_follow_up(sqlite_db_url: str) -> None:
    llm = agent({"intentScores": {"LOAN": 0.5, "BILLING": 0.45}, "followups": "Loan or bill?"},
                INTENT_COLLISION=[TimeoutError()])
    async with engine_on(sqlite_db_url, pack(**BILLING), llm=llm, settings={"llm": {"max_retries": 0}}) as engine:
        result = await engine.aprocess("that charge")
        events = await turn_events(engine, result.conversation_id)
    assert (result.intent, result.state) == ("LOAN", "INTENT_COLLISION")
    assert payload_of(events, "INTENT_AGENT_COLLISION")["question"] == "Loan or bill?"
    assert "INTENT_COLLISION_LLM_ERROR" in [e.stage for e in events]
    assert result.payload.value == "Loan or bill?"  # the model failed: the pending question is the answer
    assert payload_of(events, "INTENT_COLLISION_RESOLVED")["source"] == "PENDING_QUESTION"


async def test_scores_further_apart_than_the_gap_are_accepted(sqlite_db_url: str) -> None:
    config = [{"config_type": "AgentIntentResolver", "config_key": "COLLISION_GAP_THRESHOLD", "config_value": "0.02"}]
    llm = agent({"intentScores": {"LOAN": 0.8, "BILLING": 0.75}})
    async with engine_on(sqlite_db_url, pack(ce_config=config, **BILLING), llm=llm) as engine:
        result = await engine.aprocess("that charge")
        stages = await turn_stages(engine, result.conversation_id)
    assert (result.intent, result.state) == ("LOAN", "UNKNOWN")
    assert "INTENT_AGENT_COLLISION" not in stages and "INTENT_AGENT_ACCEPTED" in stages


async def test_a_classifier_match_never_asks_the_agent(sqlite_db_url: str) -> None:
    llm = agent()
    async with engine_on(sqlite_db_url, pack(**BILLING), llm=llm) as engine:
        result = await engine.aprocess("a loan")
    assert result.intent == "LOAN" and llm.count("INTENT_AGENT") == 0


# --- what the agent says is untrusted -------------------------------------------------------------

ALLOWED = {"LOAN", "BILLING"}


def test_scores_are_clamped_checked_against_the_allowed_intents_and_sorted() -> None:
    raw = [{"intent": "billing", "score": 1.7}, {"code": "LOAN", "confidence": "0.4"},
           {"intent": "DROP_TABLES", "score": 0.99}, {"intent": "LOAN", "score": "high"},
           {"intent": "LOAN", "score": 0.6}, "not an object", {"intent": None, "score": 0.5}]
    assert parse_scores(raw, ALLOWED) == [("BILLING", 1.0), ("LOAN", 0.6)]
    assert parse_scores({"LOAN": -3, "BILLING": 0.2}, ALLOWED) == [("BILLING", 0.2), ("LOAN", 0.0)]
    assert parse_scores({"LOAN": 0.5, "BILLING": 0.5}, ALLOWED) == [("BILLING", 0.5), ("LOAN", 0.5)]  # ties by code
    assert parse_scores("LOAN", ALLOWED) == [] and parse_scores(None, ALLOWED) == []


def test_an_answer_without_an_intent_takes_the_best_score() -> None:
    answer = parse_answer({"intentScores": {"LOAN": 0.3, "BILLING": 0.7}, "follow_ups": "Which one?"}, ALLOWED)
    assert (answer.intent, answer.confidence, answer.followups) == ("BILLING", 0.7, ["Which one?"])
    named = parse_answer({"intent": " loan ", "state": "start", "confidence": None,
                          "clarificationQuestion": "   "}, ALLOWED)
    assert (named.intent, named.state, named.confidence, named.question) == ("LOAN", "START", 0.0, None)


# --- fallback_intent_state --------------------------------------------------------------------------


async def test_an_intent_cleared_by_a_host_step_falls_back_to_unknown(sqlite_db_url: str) -> None:
    def clear(turn: Any) -> None:
        turn.set("intent", None)

    steps = [Step("clear", clear, after=names.RESET_RESOLVED_INTENT)]
    async with engine_on(sqlite_db_url, pack(), steps=steps) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
    assert (result.intent, result.state, result.payload.value) == ("UNKNOWN", "START", "Fallback in START")
    assert payload_of(events, "INTENT_MISSING") == {"fallback": "UNKNOWN"}
    assert "STATE_MISSING" not in [e.stage for e in events]
