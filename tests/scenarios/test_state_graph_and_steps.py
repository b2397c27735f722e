"""State graph modes, custom steps, hooks, and failures that must leave the conversation intact."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import names
from convengine.catalog.errors import ConvEngineError, ErrorCode, StepError
from convengine.nodes.common import Step
from convengine.nodes.context import StepHook
from tests.helpers import engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio

GRAPH_RULES = [
    {"intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT", "match_pattern": "next",
     "action": "SET_STATE", "action_value": "REVIEW"},
    {"intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT", "match_pattern": "jump",
     "action": "SET_STATE", "action_value": "DONE"},
]
GRAPH_RESPONSES = [{"intent_code": "LOAN", "state_code": s, "exact_text": f"in {s}"} for s in ("REVIEW", "DONE")]
EDGES = [{"intent_code": "LOAN", "from_state": "START", "to_state": "REVIEW"},
         {"intent_code": "LOAN", "from_state": "REVIEW", "to_state": "DONE"},
         {"intent_code": "LOAN", "from_state": "UNKNOWN", "to_state": "START"}]


def graph_pack(mode: str | None = None, soft: bool = False) -> dict[str, Any]:
    settings: dict[str, Any] = {"flow": {"state-graph": {"soft-block-on-violation": soft}}}
    if mode:
        settings["flow"]["state-graph"]["mode"] = mode
    return pack(ce_rule=GRAPH_RULES, ce_response=GRAPH_RESPONSES, ce_state_graph=EDGES, settings=settings)


async def test_allowed_transitions_are_valid(db_url: str) -> None:
    async with engine_on(db_url, graph_pack("HARD_BLOCK")) as engine:
        first = await engine.aprocess("loan")
        result = await engine.aprocess("next", first.conversation_id)
        assert result.state == "REVIEW"
        events = await turn_events(engine, first.conversation_id)
        checked = payload_of(events, "STATE_GRAPH_VALID")["checked"]
        assert {"fromState": "START", "toState": "REVIEW", "intent": "LOAN", "cause": "TURN"} in checked


@pytest.mark.parametrize(("mode", "soft", "final_state", "soft_flag"), [
    ("AUDIT_ONLY", False, "DONE", False),
    (None, True, "DONE", True),  # ConvEngine's soft-block-on-violation flag
    ("SOFT_BLOCK", False, "DONE", True),
    ("HARD_BLOCK", False, "START", False),
])
async def test_a_violation_in_each_mode(db_url: str, mode: str | None, soft: bool, final_state: str,
                                        soft_flag: bool) -> None:
    async with engine_on(db_url, graph_pack(mode, soft)) as engine:
        first = await engine.aprocess("loan")
        result = await engine.aprocess("jump", first.conversation_id)
        assert result.state == final_state
        events = await turn_events(engine, first.conversation_id)
        violations = [e.payload for e in events if e.stage == "STATE_GRAPH_VIOLATION"]
        assert {(v["fromState"], v["toState"], v["cause"].split()[0]) for v in violations} == {
            ("START", "DONE", "TURN"), ("START", "DONE", "rule")}
        assert all(v["softBlock"] is soft_flag for v in violations)
        stages = [e.stage for e in events]
        assert ("STATE_GRAPH_BLOCKED" in stages) is (final_state == "START")
        state = await engine.astate(first.conversation_id)
        assert state["state"] == final_state


async def test_no_edges_for_an_intent_means_everything_is_allowed(db_url: str) -> None:
    data = graph_pack("HARD_BLOCK")
    for edge in data["ce_state_graph"]:
        edge["intent_code"] = "GREETING"
    data["ce_intent_classifier"].append({"intent_code": "GREETING", "state_code": "START", "rule_type": "EXACT",
                                         "pattern": "never", "priority": 9})
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("loan")
        assert (await engine.aprocess("jump", first.conversation_id)).state == "DONE"


async def test_custom_steps_run_where_they_are_placed(db_url: str) -> None:
    seen: list[tuple[str, str]] = []

    async def before_rules(turn: Any) -> None:
        seen.append(("before_rules", turn.state))
        turn.params["tagged_by_step"] = True

    def after_response(turn: Any) -> None:
        seen.append(("after_response", turn.get("payload")["value"]))

    steps = [Step("tag_it", before_rules, before=names.RULES), Step("look", after_response,
                                                                    after=names.RESPONSE_RESOLUTION)]
    async with engine_on(db_url, pack(), steps=steps) as engine:
        result = await engine.aprocess("loan")
        assert seen == [("before_rules", "START"), ("after_response", "Loan started")]
        entered = [e.payload["step"] for e in await turn_events(engine, result.conversation_id)
                   if e.stage == "STEP_ENTER"]
        assert entered.index("tag_it") == entered.index("rules") - 1
        assert entered.index("look") == entered.index("response_resolution") + 1
        assert (await engine.astate(result.conversation_id))["input_params"]["tagged_by_step"] is True


@pytest.mark.parametrize(("step", "code"), [
    (Step("x", lambda t: None, before="no_such_step"), ErrorCode.UNKNOWN_STEP),
    (Step("rules", lambda t: None, after="memory"), ErrorCode.DUPLICATE_ENGINE_STEP),
    (Step("y", lambda t: None, after=names.PIPELINE_END_GUARD), ErrorCode.PIPELINE_CONSTRAINT_VIOLATION),
    (Step("z", lambda t: None), ErrorCode.PIPELINE_CONSTRAINT_VIOLATION),
])
async def test_misplaced_custom_steps_are_rejected(db_url: str, step: Step, code: ErrorCode) -> None:
    with pytest.raises(ConvEngineError) as info:
        async with engine_on(db_url, pack(), steps=[step]):
            pass
    assert info.value.code == code


async def test_hooks_run_and_a_failing_hook_never_breaks_the_turn(db_url: str) -> None:
    calls: list[str] = []

    def before(step: str, turn: Any) -> None:
        calls.append(f"before:{step}")

    async def after(step: str, turn: Any) -> None:
        calls.append(f"after:{step}")

    def broken(step: str, turn: Any) -> None:
        raise ValueError("hook bug")

    hooks = [StepHook(before=before, after=after, steps=("rules", "memory")), StepHook(after=broken)]
    async with engine_on(db_url, pack(), hooks=hooks) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "Loan started"
        assert calls == ["before:rules", "after:rules", "before:memory", "after:memory"]
        errors = [e.payload for e in await turn_events(engine, result.conversation_id) if e.stage == "STEP_HOOK_ERROR"]
        assert errors and all(e["errorMessage"] == "hook bug" for e in errors)


async def test_an_error_hook_sees_the_failure(db_url: str) -> None:
    seen: list[str] = []

    def explode(turn: Any) -> None:
        raise RuntimeError("custom step exploded")

    hooks = [StepHook(on_error=lambda step, turn, exc: seen.append(f"{step}:{exc}"))]
    async with engine_on(db_url, pack(), steps=[Step("boom", explode, after="rules")], hooks=hooks) as engine:
        with pytest.raises(StepError):
            await engine.aprocess("loan")
        assert seen == ["boom:custom step exploded"]


async def test_a_failing_step_leaves_the_previous_turn_intact_and_the_next_turn_works(db_url: str) -> None:
    armed = {"on": False}

    def sometimes(turn: Any) -> None:
        if armed["on"]:
            raise RuntimeError("custom step exploded")

    async with engine_on(db_url, pack(), steps=[Step("flaky", sometimes, after="rules")]) as engine:
        first = await engine.aprocess("hello", input_params={"keep": 1})
        before = await engine.astate(first.conversation_id)
        armed["on"] = True
        with pytest.raises(StepError, match="step flaky failed: RuntimeError: custom step exploded") as info:
            await engine.aprocess("loan", first.conversation_id, input_params={"other": 2})
        assert info.value.code == ErrorCode.PIPELINE_STEP_FAILED and info.value.details["step"] == "flaky"
        after = await engine.astate(first.conversation_id)
        for key in ("intent", "state", "context", "input_params", "turn", "recent_turns"):
            assert after[key] == before[key], key
        assert len(await engine.ahistory(first.conversation_id)) == 1
        stages = [e.stage for e in await engine.aaudit(first.conversation_id)]
        assert "STEP_ERROR" in stages and stages[-1] == "ENGINE_KNOWN_FAILURE"
        armed["on"] = False
        again = await engine.aprocess("loan", first.conversation_id)
        assert (again.intent, again.state, again.turn) == ("LOAN", "START", 2)
        assert [h["user_input"] for h in await engine.ahistory(first.conversation_id)] == ["hello", "loan"]


async def test_a_failed_first_turn_leaves_no_conversation_state(db_url: str) -> None:
    def explode(turn: Any) -> None:
        raise RuntimeError("nope")

    from convengine.catalog.errors import ConversationNotFoundError

    async with engine_on(db_url, pack(), steps=[Step("boom", explode, after="audit_user_input")]) as engine:
        cid = "6b8f0a1e-1111-4222-8333-444455556666"
        with pytest.raises(StepError):
            await engine.aprocess("hello", cid)
        with pytest.raises(ConversationNotFoundError):
            await engine.astate(cid)
        stages = [e.stage for e in await engine.aaudit(cid)]  # the failure is still audited
        assert "STEP_ERROR" in stages and stages[-1] == "ENGINE_KNOWN_FAILURE"


async def test_skip_stages_are_audited_with_convengine_stage_names(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        result = await engine.aprocess("hello")
        stages = await turn_stages(engine, result.conversation_id)
        for stage in ("AUTO_ADVANCE_SKIPPED_NO_SCHEMA", "MCP_NO_TOOLS_AVAILABLE", "CONTAINER_DATA_SKIPPED",
                      "PENDING_ACTION_SKIPPED"):
            assert stage in stages
