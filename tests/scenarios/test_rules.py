"""The rules engine through Engine: match types, passes, ordering and every action."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import names
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


def rule(action: str, value: str | None, *, match: str = "ANY", kind: str = "EXACT", state: str = "START",
         phase: str = "PRE_RESPONSE_RESOLUTION", priority: int = 100, intent: str = "LOAN", **extra: Any) -> dict:
    return {"phase": phase, "intent_code": intent, "state_code": state, "rule_type": kind, "match_pattern": match,
            "action": action, "action_value": value, "priority": priority, **extra}


STATES = [{"intent_code": "LOAN", "state_code": s, "exact_text": f"in {s}"} for s in ("REVIEW", "DONE")]


async def test_match_types_exact_regex_json_path_and_context_json_path(db_url: str) -> None:
    rules = [
        rule("SET_INPUT_PARAM", "exact_hit", match="loan please"),
        rule("SET_INPUT_PARAM", "regex_hit", kind="REGEX", match=r"\bPLEASE\b"),
        rule("SET_INPUT_PARAM", "json_hit", kind="JSON_PATH", match="$[?(@.intent == 'LOAN' && @.state == 'START')]"),
        rule("SET_INPUT_PARAM", "json_miss", kind="JSON_PATH", match="$[?(@.state == 'DONE')]"),
        rule("SET_INPUT_PARAM", "ctx_hit", kind="CONTEXT_JSON_PATH", match="$.customer.id"),
        rule("SET_INPUT_PARAM", "ctx_miss", kind="CONTEXT_JSON_PATH", match="$.nothing"),
        rule("SET_INPUT_PARAM", "exact_miss", match="something else"),
    ]
    data = pack(ce_rule=rules)
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("hello", input_params={})
        # put a value in the context through a rule task so CONTEXT_JSON_PATH has something to find
        result = await engine.aprocess("loan please", first.conversation_id)
        events = await turn_events(engine, result.conversation_id)
        applied = {e.payload["params"] and next(iter(e.payload["params"])) for e in events if e.stage == "SET_INPUT_PARAM"}
        assert applied == {"exact_hit", "regex_hit", "json_hit"}
        misses = [e.payload["ruleId"] for e in events if e.stage == "RULE_NO_MATCH (RulesStep)"]
        assert len(misses) == 4


async def test_context_json_path_reads_the_context(db_url: str) -> None:
    def remember(task: Any) -> None:
        task.context["customer"] = {"id": "c-9"}

    rules = [rule("SET_TASK", "crm:remember", phase="POST_INTENT"),
             rule("SET_INPUT_PARAM", "found_customer", kind="CONTEXT_JSON_PATH", match="$.customer.id")]
    async with engine_on(db_url, pack(ce_rule=rules), tasks={"crm": {"remember": remember}}) as engine:
        result = await engine.aprocess("loan")
        assert result.context["customer"] == {"id": "c-9"}
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "SET_INPUT_PARAM")["params"] == {"found_customer": True}


async def test_every_match_fires_and_state_changes_trigger_another_pass(db_url: str) -> None:
    rules = [
        rule("SET_STATE", "REVIEW", priority=1),
        rule("SET_INPUT_PARAM", "second_rule_same_pass", priority=2),
        rule("SET_STATE", "DONE", state="REVIEW", priority=1),
        rule("SET_INPUT_PARAM", "ran_in_done", state="DONE"),
    ]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=STATES)) as engine:
        result = await engine.aprocess("loan")
        assert (result.state, result.payload.value) == ("DONE", "in DONE")
        events = await turn_events(engine, result.conversation_id)
        set_states = [(e.payload["fromState"], e.payload["toState"]) for e in events if e.stage == "SET_STATE"]
        assert set_states == [("START", "REVIEW"), ("REVIEW", "DONE")]
        params = [next(iter(e.payload["params"])) for e in events if e.stage == "SET_INPUT_PARAM"]
        assert params == ["second_rule_same_pass", "ran_in_done"]


async def test_passes_stop_at_the_limit(db_url: str) -> None:
    rules = [rule("SET_STATE", "REVIEW", state="START"), rule("SET_STATE", "START", state="REVIEW")]
    data = pack(ce_rule=rules, ce_response=STATES[:1], settings={"max_rule_passes": 3})
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
        moves = [e for e in events if e.stage == "SET_STATE" and e.step == "rules"]
        assert len(moves) == 3
        assert result.state == "REVIEW"
        limit = payload_of(events, "RULE_PASS_LIMIT_REACHED (RulesStep)")
        assert (limit["passes"], limit["maxPasses"], limit["state"]) == (3, 3, "REVIEW")


async def test_rules_that_settle_before_the_limit_report_no_limit(db_url: str) -> None:
    rules = [rule("SET_STATE", "REVIEW", state="START")]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=STATES[:1], settings={"max_rule_passes": 3})) as engine:
        result = await engine.aprocess("loan")
        stages = await turn_stages(engine, result.conversation_id)
        assert result.state == "REVIEW" and not any(s.startswith("RULE_PASS_LIMIT_REACHED") for s in stages)


async def test_candidates_are_ordered_by_scope_bucket_then_priority(db_url: str) -> None:
    rules = [
        rule("SET_INPUT_PARAM", "any_any", intent="ANY", state="ANY", priority=1),
        rule("SET_INPUT_PARAM", "any_state", intent="ANY", state="START", priority=1),
        rule("SET_INPUT_PARAM", "intent_any", state="ANY", priority=1),
        rule("SET_INPUT_PARAM", "exact_p9", priority=9),
        rule("SET_INPUT_PARAM", "exact_p5", priority=5),
    ]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
        order = [next(iter(e.payload["params"])) for e in events if e.stage == "SET_INPUT_PARAM" and e.step == "rules"]
        assert order == ["exact_p5", "exact_p9", "intent_any", "any_state", "any_any"]


async def test_set_input_param_value_formats_and_persistence(db_url: str) -> None:
    rules = [
        rule("SET_INPUT_PARAM", '{"a": 1, "b": "two"}', priority=1),
        rule("SET_INPUT_PARAM", '{"key": "c", "value": [1, 2]}', priority=2),
        rule("SET_INPUT_PARAM", '[{"key": "d", "value": true}, {"key": "e", "value": null}]', priority=3),
        rule("SET_INPUT_PARAM", "f:42", priority=4),
        rule("SET_INPUT_PARAM", "g:4.5", priority=5),
        rule("SET_INPUT_PARAM", "h:false", priority=6),
        rule("SET_INPUT_PARAM", "i:hello world", priority=7),
        rule("SET_INPUT_PARAM", "j", priority=8),
    ]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        result = await engine.aprocess("loan")
        state = await engine.astate(result.conversation_id)
        assert state["input_params"] == {"a": 1, "b": "two", "c": [1, 2], "d": True, "e": None, "f": 42, "g": 4.5,
                                         "h": False, "i": "hello world", "j": True}


async def test_set_intent_set_dialogue_act_and_set_json(db_url: str) -> None:
    rules = [
        rule("SET_DIALOGUE_ACT", '{"dialogueAct": "EDIT", "confidence": 0.9, "source": "RULE_X"}',
             phase="POST_DIALOGUE_ACT", intent="ANY", state="ANY"),
        rule("SET_JSON", "act_copy:$.inputParams.dialogue_act", priority=1),
        rule("SET_INTENT", "GREETING", priority=2),
    ]
    extra_response = [{"intent_code": "GREETING", "state_code": "START", "exact_text": "greeting in start"}]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=extra_response)) as engine:
        result = await engine.aprocess("loan")
        assert (result.intent, result.state) == ("GREETING", "START")
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "SET_DIALOGUE_ACT")["dialogueAct"] == "EDIT"
        assert payload_of(events, "DIALOGUE_ACT_CLASSIFIED")["dialogueAct"] == "NEW_REQUEST"
        assert payload_of(events, "SET_JSON")["value"] == "EDIT"
        assert payload_of(events, "SET_INTENT") == {"ruleId": payload_of(events, "SET_INTENT")["ruleId"],
                                                    "fromIntent": "LOAN", "toIntent": "GREETING"}
        rule_id = payload_of(events, "SET_INTENT")["ruleId"]
        assert payload_of(events, "INTENT_UPDATED") == {"fromIntent": "LOAN", "toIntent": "GREETING",
                                                        "cause": f"rule {rule_id}"}
        assert payload_of(events, "INTERACTION_POLICY_DECIDED")["dialogueAct"] == "EDIT"


async def test_set_json_that_finds_nothing_leaves_its_target_unchanged(db_url: str) -> None:
    rules = [rule("SET_INPUT_PARAM", "account:A-1", priority=1),
             rule("SET_JSON", "account:$.inputParams.no_such_key", priority=2)]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        result = await engine.aprocess("loan")
        state = await engine.astate(result.conversation_id)
        events = await turn_events(engine, result.conversation_id)
    assert state["input_params"]["account"] == "A-1"
    assert payload_of(events, "SET_JSON")["matched"] is False


async def test_get_context_schema_json_and_session(db_url: str) -> None:
    rules = [rule("GET_CONTEXT", None, priority=1), rule("GET_SESSION", "my_session", priority=2),
             rule("GET_SCHEMA_JSON", None, priority=3)]
    data = pack(ce_rule=rules)
    for row in data["ce_response"]:
        if row.get("exact_text") == "Loan started":
            row["exact_text"] = "{{my_session.intent}}/{{my_session.state}} ctx={{inputParams.context}}"
    async with engine_on(db_url, data) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "LOAN/START ctx={}"
        events = await turn_events(engine, result.conversation_id)
        assert [e.stage for e in events if e.stage.startswith("GET_")] == ["GET_CONTEXT", "GET_SESSION",
                                                                            "GET_SCHEMA_JSON"]
        state = await engine.astate(result.conversation_id)
        assert "my_session" in state["input_params"]
        assert "context" not in state["input_params"]  # reserved keys are turn-scoped


async def test_set_task_calls_registered_callables_and_failures_do_not_break_the_turn(db_url: str) -> None:
    calls: list[str] = []

    class Crm:
        def tag(self, task: Any, rule_row: Any) -> None:
            calls.append(f"tag:{rule_row.rule_id}:{task.intent}")
            task.params["tagged"] = True

        async def ping(self, task: Any) -> None:
            calls.append("ping")

        def broken(self, task: Any) -> None:
            raise RuntimeError("crm is down")

    rules = [rule("SET_TASK", "crm:tag,ping", priority=1), rule("SET_TASK", "crm:broken", priority=2),
             rule("SET_TASK", "nobody:nothing", priority=3)]
    async with engine_on(db_url, pack(ce_rule=rules), tasks={"crm": Crm()}) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "Loan started"
        assert calls[0].startswith("tag:") and calls[0].endswith(":LOAN") and calls[1] == "ping"
        events = await turn_events(engine, result.conversation_id)
        failures = [e.payload for e in events if e.stage == "SET_TASK_FAILED"]
        assert failures[0]["errorMessage"] == "crm is down"
        assert "no task registered for bean 'nobody'" in failures[1]["errorMessage"]
        assert (await engine.astate(result.conversation_id))["input_params"]["tagged"] is True


async def test_a_task_changing_the_intent_is_audited_as_the_tasks_doing(db_url: str) -> None:
    def escalate(task: Any) -> None:
        task.set_intent("greeting ")
        task.set_intent("GREETING")  # no change: nothing more to audit

    extra_response = [{"intent_code": "GREETING", "state_code": "START", "exact_text": "greeting in start"}]
    async with engine_on(db_url, pack(ce_rule=[rule("SET_TASK", "crm:escalate")], ce_response=extra_response),
                         tasks={"crm": {"escalate": escalate}}) as engine:
        result = await engine.aprocess("loan")
        assert (result.intent, result.payload.value) == ("GREETING", "greeting in start")
        events = await turn_events(engine, result.conversation_id)
    changes = [(e.step, e.payload) for e in events if e.stage == "INTENT_UPDATED"]
    assert changes == [(names.INTENT_RESOLUTION, {"fromIntent": "UNKNOWN", "toIntent": "LOAN", "cause": "CLASSIFIER"}),
                       (names.RULES, {"fromIntent": "LOAN", "toIntent": "GREETING", "cause": "task"})]


async def test_rule_audits_name_their_source_and_stamp_params(db_url: str) -> None:
    rules = [rule("SET_INPUT_PARAM", "from_post_intent", phase="POST_CLASSIFIER_INTENT"),
             rule("SET_INPUT_PARAM", "from_dialogue", phase="POST_DIALOGUE_ACT", intent="ANY", state="ANY")]
    async with engine_on(db_url, pack(ce_rule=rules)) as engine:
        result = await engine.aprocess("loan")
        stages = await turn_stages(engine, result.conversation_id)
        assert_in_order(stages, ["RULE_MATCH (DialogueActStep)", "SET_INPUT_PARAM", "RULE_APPLIED (DialogueActStep)",
                                 "RULE_MATCH (IntentResolutionStep Classifier)",
                                 "RULE_APPLIED (IntentResolutionStep Classifier)", "RULE_NO_MATCH (RulesStep)"])
        events = await turn_events(engine, result.conversation_id)
        match = payload_of(events, "RULE_MATCH (IntentResolutionStep Classifier)")
        assert match["phase"] == "POST_CLASSIFIER_INTENT" and match["intent"] == "LOAN"


async def test_custom_match_types_and_actions(db_url: str) -> None:
    def longer_than(rule_row: Any, session: Any) -> bool:
        return len(session.user_text) > int(rule_row.match_pattern)

    def shout(rule_row: Any, session: Any, env: Any) -> dict:
        session.params["shouted"] = session.user_text.upper()
        return {"ruleId": rule_row.rule_id}

    rules = [rule("SHOUT", None, kind="LONGER_THAN", match="5")]
    async with engine_on(db_url, pack(ce_rule=rules), rule_types={"LONGER_THAN": longer_than},
                         rule_actions={"SHOUT": shout}) as engine:
        result = await engine.aprocess("loan please")
        assert (await engine.astate(result.conversation_id))["input_params"]["shouted"] == "LOAN PLEASE"
        assert "SHOUT" in await turn_stages(engine, result.conversation_id)
