"""Pending actions (action_lifecycle, disambiguation, pending_action) and the guardrail step:
which task a confirmation runs, how a choice between tied actions is asked and answered, and what a
denied turn is kept from doing."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import names
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack, payload_of, turn_events, turn_stages


class Tasks:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def submit(self, task: Any) -> None:
        self.calls.append("submit")

    def notify(self, task: Any) -> None:
        self.calls.append("notify")

    def fail(self, task: Any) -> None:
        self.calls.append("fail")
        raise RuntimeError("ledger offline")

    def archive(self, task: Any) -> None:
        self.calls.append("archive")


def action(key: str, methods: str, priority: int = 1, description: str | None = None) -> dict[str, Any]:
    return {"intent_code": "LOAN", "state_code": "START", "action_key": key, "bean_name": "tasks",
            "method_names": methods, "priority": priority, "description": description}


def name_pending_action(turn: Any) -> None:
    """A host step standing for a step that left a pending action in the context (no catalogue row)."""
    if "pa" in turn.read_params():
        turn.context["pending_action"] = turn.read_params()["pa"]


HOST_PENDING = [Step("name_pending", name_pending_action, after=names.AUDIT_USER_INPUT)]


# --- what a confirmation runs -----------------------------------------------------------------


@pytest.mark.parametrize("pending", ["tasks:submit,notify", {"bean": "tasks", "methods": "submit,notify"},
                                     {"task": "tasks:submit,notify"}])
async def test_a_pending_action_in_the_context_runs_its_tasks_in_order(db_url: str, pending: Any) -> None:
    tasks = Tasks()
    async with engine_on(db_url, pack(), tasks={"tasks": tasks}, steps=HOST_PENDING) as engine:
        cid = (await engine.aprocess("loan", input_params={"pa": pending})).conversation_id
        result = await engine.aprocess("yes", cid)
        executed = payload_of(await turn_events(engine, cid), "PENDING_ACTION_EXECUTED")
    assert tasks.calls == ["submit", "notify"]
    assert (executed["pendingActionRef"], executed["pendingActionResult"]) == ("tasks:submit,notify", "EXECUTED")
    assert result.context["pending_action_runtime"]["status"] == "EXECUTED"


async def test_a_reference_without_a_bean_fails_without_running_anything(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, pack(), tasks={"tasks": tasks}, steps=HOST_PENDING) as engine:
        cid = (await engine.aprocess("loan", input_params={"pa": ":submit"})).conversation_id
        result = await engine.aprocess("yes", cid)
        failed = payload_of(await turn_events(engine, cid), "PENDING_ACTION_FAILED")
    assert tasks.calls == [] and failed["error"] == "invalid pending action reference"
    assert failed["pendingActionResult"] == "FAILED"
    assert result.context["pending_action_runtime"].get("status") != "EXECUTED"


async def test_a_failing_task_stops_the_tasks_after_it(db_url: str) -> None:
    tasks = Tasks()
    data = pack(ce_pending_action=[action("SUBMIT", "submit,fail,notify")])
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        failed = payload_of(await turn_events(engine, cid), "PENDING_ACTION_FAILED")
    assert tasks.calls == ["submit", "fail"]
    assert (failed["errorType"], failed["error"]) == ("RuntimeError", "ledger offline")


async def test_the_top_priority_action_runs_unless_the_caller_names_another(db_url: str) -> None:
    tasks = Tasks()
    data = pack(ce_pending_action=[action("ARCHIVE", "archive", 2), action("SUBMIT", "submit", 1)])
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        assert tasks.calls == ["submit"]
        await engine.aprocess("yes", cid, input_params={"pending_action_key": " archive "})
        assert tasks.calls == ["submit", "archive"]  # the key matches whatever its case and spaces
        stages = await turn_stages(engine, cid)
    assert "DISAMBIGUATION_REQUIRED" not in stages


async def test_no_is_recorded_as_a_rejection_of_the_open_action(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, pack(ce_pending_action=[action("SUBMIT", "submit")]), tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        result = await engine.aprocess("no", cid)
        events = await turn_events(engine, cid)
    assert tasks.calls == []
    lifecycle = [e.payload["event"] for e in events if e.stage == "PENDING_ACTION_LIFECYCLE"]
    assert lifecycle == ["OPEN", "REJECTED"]
    assert payload_of(events, "PENDING_ACTION_REJECTED")["pendingActionRef"] == "tasks:submit"
    assert result.context["pending_action_runtime"]["status"] == "REJECTED"


async def test_with_the_lifecycle_off_a_yes_still_runs_the_action(db_url: str) -> None:
    tasks = Tasks()
    data = pack(ce_pending_action=[action("SUBMIT", "submit")],
                settings={"flow": {"action-lifecycle": {"enabled": False}}})
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        events = await turn_events(engine, cid)
    assert tasks.calls == ["submit"]
    skip = payload_of(events, "PENDING_ACTION_LIFECYCLE")
    assert skip == {"event": "SKIPPED", "reason": "ACTION_LIFECYCLE_DISABLED"}


# --- disambiguation ------------------------------------------------------------------------------

TIED = [action("SUBMIT", "submit", 1, "submit the form"), action("ARCHIVE", "archive", 1, "archive the form"),
        action("NOTIFY", "notify", 1, "notify the officer")]


async def test_the_question_lists_at_most_max_options_in_the_packs_words(db_url: str) -> None:
    config = [{"config_type": "DisambiguationStep", "config_key": "QUESTION_TEMPLATE",
               "config_value": "Pick one of {{candidate_count}}: {{options}}"}]
    responses = [{"intent_code": "LOAN", "state_code": "START", "exact_text": "{{context.pending_clarification.question}}",
                  "priority": 0}]
    data = pack(ce_pending_action=TIED, ce_config=config, ce_response=responses,
                settings={"flow": {"disambiguation": {"max-options": 2}}})
    tasks = Tasks()
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        asked = await engine.aprocess("yes", cid)
        required = payload_of(await turn_events(engine, cid), "DISAMBIGUATION_REQUIRED")
    assert tasks.calls == []
    assert asked.payload.value == "Pick one of 3: SUBMIT (submit the form), ARCHIVE (archive the form)"
    assert (required["candidateCount"], len(required["options"])) == (3, 2)
    assert [o["action_key"] for o in asked.context["pending_clarification"]["options"]] == ["SUBMIT", "ARCHIVE"]


async def test_a_reply_naming_two_options_picks_neither(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, pack(ce_pending_action=TIED), tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        still = await engine.aprocess("submit or archive, not sure", cid)
        assert tasks.calls == [] and still.context["pending_clarification"]["question"]
        await engine.aprocess("notify the officer", cid)
        stages = await turn_stages(engine, cid)
    assert tasks.calls == ["notify"]
    assert "DISAMBIGUATION_RESOLVED" in stages


async def test_with_disambiguation_off_a_tie_runs_nothing(db_url: str) -> None:
    tasks = Tasks()
    data = pack(ce_pending_action=TIED, settings={"flow": {"disambiguation": {"enabled": False}}})
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        result = await engine.aprocess("yes", cid)
        events = await turn_events(engine, cid)
    assert tasks.calls == [] and "pending_clarification" not in result.context
    assert payload_of(events, "DISAMBIGUATION_SKIPPED") == {"reason": "DISAMBIGUATION_DISABLED"}
    assert payload_of(events, "PENDING_ACTION_SKIPPED")["reason"] == "NO_PENDING_ACTION"


# --- guardrail ------------------------------------------------------------------------------------


def guarded(**guardrail: Any) -> dict[str, Any]:
    return pack(ce_pending_action=[action("SUBMIT", "submit")], ce_mcp_tool=[
        {"tool_id": 1, "tool_code": "ledger.read", "tool_group": "CALCULATOR_TRANSFORM", "intent_code": "LOAN",
         "state_code": "ANY", "description": "reads the ledger"}],
        settings={"flow": {"guardrail": {"require-approval-for-sensitive-actions": True, **guardrail}}})


async def test_a_denied_turn_runs_neither_the_pending_action_nor_a_requested_tool(db_url: str) -> None:
    tasks, reads = Tasks(), []
    tools = {"ledger.read": lambda args: reads.append(args) or {"ok": True}}
    data = guarded(**{"sensitive-patterns": [r"\bnow\b"]})
    async with engine_on(db_url, data, tasks={"tasks": tasks}, tools=tools) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("now", cid, input_params={"tool_request": {"tool_code": "ledger.read", "args": {}}})
        events = await turn_events(engine, cid)
        assert tasks.calls == [] and reads == []
        assert payload_of(events, "TOOL_ORCHESTRATION_SKIPPED")["reason"] == "BLOCKED_BY_GUARDRAIL"
        await engine.aprocess("fine", cid, input_params={"tool_request": {"tool_code": "ledger.read", "args": {}}})
    assert reads == [{}]


@pytest.mark.parametrize(("fail_closed", "denied"), [(True, True), (False, False)])
async def test_a_pattern_that_cannot_be_evaluated_denies_only_when_fail_closed(sqlite_db_url: str, fail_closed: bool,
                                                                              denied: bool) -> None:
    data = guarded(**{"sensitive-patterns": ["(unclosed"], "approval-gate-fail-closed": fail_closed})
    async with engine_on(sqlite_db_url, data) as engine:
        result = await engine.aprocess("loan")
        stages = await turn_stages(engine, result.conversation_id)
        events = await turn_events(engine, result.conversation_id)
    assert ("GUARDRAIL_DENY" in stages) is denied and ("GUARDRAIL_ALLOW" in stages) is not denied
    if denied:
        deny = payload_of(events, "GUARDRAIL_DENY")
        assert (deny["reason"], deny["undecided"], deny["sensitive"]) == ("SENSITIVE_CHECK_FAILED_CLOSED", True, False)


async def test_the_guardrail_sanitises_the_text_steps_after_it_read(sqlite_db_url: str) -> None:
    seen: list[str] = []
    hook_step = Step("read_sanitised", lambda t: seen.append(t.read_params().get("sanitized_user_text")),
                     after=names.GUARDRAIL)
    async with engine_on(sqlite_db_url, pack(), steps=[hook_step]) as engine:
        await engine.aprocess("  a   loan\t\tplease\n ")
    assert seen == ["a loan please"]


async def test_a_disabled_guardrail_is_skipped_as_an_allow(sqlite_db_url: str) -> None:
    data = pack(settings={"flow": {"guardrail": {"enabled": False, "require-approval-for-sensitive-actions": True,
                                                 "sensitive-patterns": ["loan"]}}})
    async with engine_on(sqlite_db_url, data) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
    assert result.intent == "LOAN"
    assert payload_of(events, "GUARDRAIL_ALLOW") == {"result": "ALLOW", "skipped": True, "reason": "GUARDRAIL_DISABLED"}
    assert "GUARDRAIL_DENY" not in [e.stage for e in events]
