"""Routing of a real turn through the engine: every step entered or skipped (audited), explicit routes
that end the turn or loop, host steps and hooks, and the wrapper's STEP_* audits."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.audit import AuditEvent
from convengine.catalog import names
from convengine.catalog.errors import ConvEngineError, ErrorCode, StepError
from convengine.llm import ScriptedLLM
from convengine.nodes.common import Step
from convengine.nodes.context import StepHook
from tests.helpers import engine_on, pack, payload_of, turn_events

BLOCKING = [{"policy_id": 3, "rule_type": "CONTAINS", "pattern": "forbidden", "response_text": "Not allowed.",
             "priority": 1}]


def entered(events: list[AuditEvent]) -> list[str]:
    return [e.payload["step"] for e in events if e.stage == "STEP_ENTER"]


def skipped(events: list[AuditEvent]) -> dict[str, Any]:
    return {e.payload["step"]: e.payload.get("reason") for e in events if e.stage == "STEP_SKIPPED"}


async def test_each_step_is_either_entered_or_skipped_in_order_with_a_reason(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack()) as engine:
        result = await engine.aprocess("I need a loan")
        events = await turn_events(engine, result.conversation_id)
    ran, passed = entered(events), skipped(events)
    assert not set(ran) & set(passed)
    assert set(ran) | set(passed) == set(names.DEFAULT_ORDER) - {names.MCP_TOOL_CALL}  # loop-only: never fallen into
    assert ran == [n for n in names.DEFAULT_ORDER if n in ran]  # in the default order
    assert all(passed.values()), passed  # every skip says why
    assert passed[names.RESET_CONVERSATION] == "NO_RESET_TRIGGER"
    assert passed[names.SCHEMA_EXTRACTION] == "NO_SCHEMA"
    assert passed[names.POST_RESPONSE_RULES] == "NO_POST_RESPONSE_RULES"
    assert passed[names.POLICY_ENFORCEMENT] == "NO_POLICIES"  # a pack without ce_policy rows
    assert {names.INTENT_RESOLUTION, names.RULES, names.RESPONSE_RESOLUTION} <= set(ran)


async def test_a_skip_is_audited_where_the_step_would_have_run(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack()) as engine:
        result = await engine.aprocess("hello")
        stages = [(e.stage, e.payload.get("step")) for e in await turn_events(engine, result.conversation_id)]
    at = stages.index(("STEP_SKIPPED", names.SCHEMA_EXTRACTION))
    assert stages[at + 1][0] == "SCHEMA_EXTRACTION_SKIPPED"  # the step's own stage follows
    assert stages.index(("STEP_EXIT", names.INTENT_RESOLUTION)) < at < stages.index(("STEP_ENTER", names.RULES))


async def test_the_second_turn_of_a_conversation_skips_its_bootstrap(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello")
        await engine.aprocess("loan", first.conversation_id)
        one = await turn_events(engine, first.conversation_id, 0)
        two = await turn_events(engine, first.conversation_id, 1)
    assert names.PERSIST_CONVERSATION_BOOTSTRAP in entered(one)
    assert skipped(two)[names.PERSIST_CONVERSATION_BOOTSTRAP] == "CONVERSATION_EXISTS"


async def test_a_policy_block_jumps_to_the_commit_past_host_steps(db_url: str) -> None:
    ran: list[str] = []
    steps = [Step("after_act", lambda t: ran.append("after_act"), after=names.DIALOGUE_ACT),
             Step("before_memory", lambda t: ran.append("before_memory"), before=names.MEMORY)]
    async with engine_on(db_url, pack(ce_policy=BLOCKING), steps=steps) as engine:
        result = await engine.aprocess("this is forbidden")
        events = await turn_events(engine, result.conversation_id)
        assert (result.status, result.payload.value) == ("BLOCKED", "Not allowed.")
        assert ran == []
        assert entered(events)[-3:] == [names.POLICY_ENFORCEMENT, names.PERSIST_CONVERSATION, names.PIPELINE_END_GUARD]
        assert skipped(events) == {names.RESET_CONVERSATION: "NO_RESET_TRIGGER"}  # jumped over, not skipped
        exits = {e.payload["step"]: e.payload["outcome"] for e in events if e.stage == "STEP_EXIT"}
        assert exits[names.POLICY_ENFORCEMENT] == "Stop"
        assert exits[names.AUDIT_USER_INPUT] == "Continue"
        allowed = await engine.aprocess("hello", result.conversation_id)
        assert (allowed.status, allowed.payload.value) == ("RUNNING", "Hello there")
        assert ran == ["after_act", "before_memory"]


async def test_a_disabled_policy_does_not_block(sqlite_db_url: str) -> None:
    policies = [{**BLOCKING[0], "enabled": False}]
    async with engine_on(sqlite_db_url, pack(ce_policy=policies)) as engine:
        result = await engine.aprocess("hello forbidden")
        assert (result.status, result.intent) == ("RUNNING", "GREETING")
        assert skipped(await turn_events(engine, result.conversation_id))[names.POLICY_ENFORCEMENT] == "NO_POLICIES"


async def test_a_host_step_with_a_skip_rule_is_skipped_and_audited(db_url: str) -> None:
    ran: list[str] = []

    def only_for_loans(turn: Any) -> tuple[str | None, dict[str, Any]] | None:
        return None if turn.intent == "LOAN" else ("HOST_STEP_SKIPPED", {"reason": "NOT_A_LOAN"})

    step = Step("loan_only", lambda t: ran.append(t.intent), skip=only_for_loans, after=names.RULES)
    async with engine_on(db_url, pack(), steps=[step]) as engine:
        greeting = await engine.aprocess("hello")
        events = await turn_events(engine, greeting.conversation_id)
        assert skipped(events)["loan_only"] == "NOT_A_LOAN"
        assert payload_of(events, "HOST_STEP_SKIPPED") == {"reason": "NOT_A_LOAN"}
        assert ran == []
        await engine.aprocess("loan", greeting.conversation_id)
        assert ran == ["LOAN"]
        assert "loan_only" in entered(await turn_events(engine, greeting.conversation_id))


async def test_a_host_step_can_answer_and_route_straight_to_the_commit(db_url: str) -> None:
    def answer_early(turn: Any) -> None:
        if "shortcut" in turn.user_text:
            turn.set("payload", {"type": "TEXT", "value": "Answered by the host"})
            turn.route_to(names.PERSIST_CONVERSATION)

    step = Step("shortcut", answer_early, after=names.AUDIT_USER_INPUT, routes=(names.PERSIST_CONVERSATION,))
    async with engine_on(db_url, pack(), steps=[step]) as engine:
        result = await engine.aprocess("take the shortcut")
        assert result.payload.value == "Answered by the host"
        events = await turn_events(engine, result.conversation_id)
        assert names.INTENT_RESOLUTION not in entered(events)
        assert payload_of(events, "STEP_EXIT")["step"] == names.PIPELINE_END_GUARD
        normal = await engine.aprocess("hello", result.conversation_id)
        assert normal.payload.value == "Hello there"


async def test_step_enter_names_convengines_step_class(sqlite_db_url: str) -> None:
    steps = [Step("host_one", lambda t: None, after=names.RULES, java_class="com.example.HostStep"),
             Step("host_two", lambda t: None, after="host_one")]
    async with engine_on(sqlite_db_url, pack(), steps=steps) as engine:
        result = await engine.aprocess("hello")
        classes = {e.payload["step"]: e.payload["stepClass"]
                   for e in await turn_events(engine, result.conversation_id) if e.stage == "STEP_ENTER"}
    assert classes[names.RULES] == "RulesStep"
    assert classes[names.INTENT_RESOLUTION] == "IntentResolutionStep"
    assert classes["host_one"] == "com.example.HostStep"
    assert classes["host_two"] == "host_two"


# --- hooks ------------------------------------------------------------------------------------


async def test_hooks_see_only_the_steps_that_run_and_host_steps_too(sqlite_db_url: str) -> None:
    seen: list[str] = []
    hook = StepHook(before=lambda step, turn: seen.append(step))
    steps = [Step("host", lambda t: None, after=names.RULES)]
    async with engine_on(sqlite_db_url, pack(), steps=steps, hooks=[hook]) as engine:
        result = await engine.aprocess("hello")
        events = await turn_events(engine, result.conversation_id)
    assert seen == entered(events)
    assert "host" in seen and names.SCHEMA_EXTRACTION not in seen


async def test_an_after_hook_sees_what_the_step_wrote(sqlite_db_url: str) -> None:
    seen: dict[str, Any] = {}

    def after(step: str, turn: Any) -> None:
        seen[step] = (turn.intent, (turn.get("payload") or {}).get("value"))

    hook = StepHook(after=after, steps=(names.INTENT_RESOLUTION, names.RESPONSE_RESOLUTION))
    async with engine_on(sqlite_db_url, pack(), hooks=[hook]) as engine:
        await engine.aprocess("I want a loan")
    assert seen == {names.INTENT_RESOLUTION: ("LOAN", None), names.RESPONSE_RESOLUTION: ("LOAN", "Loan started")}


async def test_a_failing_hook_is_audited_with_its_phase_and_step(sqlite_db_url: str) -> None:
    def broken(step: str, turn: Any) -> None:
        raise KeyError("missing thing")

    async with engine_on(sqlite_db_url, pack(), hooks=[StepHook(before=broken, steps=(names.RULES,))]) as engine:
        result = await engine.aprocess("hello")
        assert result.payload.value == "Hello there"
        errors = [e.payload for e in await turn_events(engine, result.conversation_id) if e.stage == "STEP_HOOK_ERROR"]
    assert errors == [{"step": names.RULES, "hook": "before", "errorType": "KeyError", "errorMessage": "'missing thing'"}]


# --- failures ---------------------------------------------------------------------------------


async def test_a_convengine_error_from_a_step_keeps_its_code_and_names_the_step(sqlite_db_url: str) -> None:
    def refuse(turn: Any) -> None:
        raise ConvEngineError("host says no", code=ErrorCode.INVALID_INPUT)

    async with engine_on(sqlite_db_url, pack(), steps=[Step("gate", refuse, before=names.RULES)]) as engine:
        cid = "0b8f0a1e-1111-4222-8333-444455556666"
        with pytest.raises(ConvEngineError) as info:
            await engine.aprocess("hello", cid)
        assert info.value.code == ErrorCode.INVALID_INPUT and info.value.details["step"] == "gate"
        error = payload_of(await engine.aaudit(cid), "STEP_ERROR")
    assert (error["step"], error["errorType"], error["errorMessage"]) == ("gate", "ConvEngineError", "host says no")
    assert error["durationMs"] >= 0


async def test_a_step_failure_stops_the_turn_at_that_step(sqlite_db_url: str) -> None:
    ran: list[str] = []

    def explode(turn: Any) -> None:
        raise ValueError("bad value")

    steps = [Step("explode", explode, after=names.INTENT_RESOLUTION),
             Step("later", lambda t: ran.append("later"), before=names.RULES)]
    async with engine_on(sqlite_db_url, pack(), steps=steps) as engine:
        cid = "1b8f0a1e-1111-4222-8333-444455556666"
        with pytest.raises(StepError, match="step explode failed: ValueError: bad value"):
            await engine.aprocess("hello", cid)
        stages = [(e.stage, e.payload.get("step")) for e in await engine.aaudit(cid)]
    assert ran == []
    assert ("STEP_ERROR", "explode") in stages and ("STEP_EXIT", "explode") not in stages
    assert ("STEP_ENTER", names.RULES) not in stages


# --- the planner loop -------------------------------------------------------------------------

TOOL = [{"tool_id": 1, "tool_code": "calc.add", "tool_group": "CALCULATOR_TRANSFORM", "intent_code": "LOAN",
         "state_code": "ANY", "description": "adds numbers"}]
CALL = {"action": "CALL_TOOL", "tool_code": "calc.add", "answer": None, "operation_tag": None}


def planner(*decisions: dict[str, Any]) -> ScriptedLLM:
    return ScriptedLLM({"MCP_PLANNER": list(decisions)}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})


def add(args: dict[str, Any]) -> dict[str, Any]:
    return {"sum": args["a"] + args["b"], "summary": f"sum {args['a'] + args['b']}"}


async def test_the_planner_loop_runs_tool_calls_until_an_answer(sqlite_db_url: str) -> None:
    llm = planner({**CALL, "args": {"a": 1, "b": 2}}, {**CALL, "args": {"a": 3, "b": 4}},
                  {"action": "ANSWER", "tool_code": None, "args": None, "answer": "7", "operation_tag": None})
    async with engine_on(sqlite_db_url, pack(ce_mcp_tool=TOOL), llm=llm, tools={"calc.add": add}) as engine:
        result = await engine.aprocess("loan sums")
        events = await turn_events(engine, result.conversation_id)
    loop = [s for s in entered(events) if s in (names.MCP_PLANNER, names.MCP_TOOL_CALL, names.RULES)]
    assert loop == [names.MCP_PLANNER, names.MCP_TOOL_CALL, names.MCP_PLANNER, names.MCP_TOOL_CALL,
                    names.MCP_PLANNER, names.RULES]
    assert [o["json"]["sum"] for o in result.context["mcp"]["observations"]] == [3, 7]
    assert result.context["mcp"]["finalAnswer"] == "7"


@pytest.mark.parametrize("limit", [1, 2])
async def test_the_planner_loop_is_bound_by_the_tool_limit(sqlite_db_url: str, limit: int) -> None:
    llm = planner(*({**CALL, "args": {"a": i, "b": 1}} for i in range(6)))
    data = pack(ce_mcp_tool=TOOL, settings={"mcp": {"tool_max_loops": limit}})
    async with engine_on(sqlite_db_url, data, llm=llm, tools={"calc.add": add}) as engine:
        result = await engine.aprocess("loan sums")
        events = await turn_events(engine, result.conversation_id)
    ran = entered(events)
    assert ran.count(names.MCP_TOOL_CALL) == limit
    assert ran.count(names.MCP_PLANNER) == limit + 1  # the last visit sees the limit and ends the loop
    assert llm.count("MCP_PLANNER") == limit
    assert payload_of(events, "MCP_LOOP_LIMIT_REACHED") == {"limit": limit}
    assert ran.index(names.RULES) > max(i for i, s in enumerate(ran) if s == names.MCP_PLANNER)
    assert result.payload.value == "Loan started"  # the turn still answers


async def test_the_planner_step_runs_when_a_pre_agent_mcp_rule_could_change_its_scope(sqlite_db_url: str) -> None:
    rules = [{"phase": "PRE_AGENT_MCP", "intent_code": "ANY", "state_code": "ANY", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": '{"pre_mcp_seen": true}'}]
    async with engine_on(sqlite_db_url, pack(ce_rule=rules)) as engine:
        with_rule = await engine.aprocess("loan")
        events = await turn_events(engine, with_rule.conversation_id)
        state = await engine.astate(with_rule.conversation_id)
    assert names.MCP_PLANNER in entered(events) and names.MCP_PLANNER not in skipped(events)
    assert state["input_params"]["pre_mcp_seen"] is True
    assert payload_of(events, "MCP_NO_TOOLS_AVAILABLE") == {"intent": "LOAN", "state": "START"}  # then no tool
    assert entered(events).index(names.RULES) == entered(events).index(names.MCP_PLANNER) + 1
