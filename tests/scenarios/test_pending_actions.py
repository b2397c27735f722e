"""Pending actions (confirm, reject, fail, expire), disambiguation, guardrail and context data."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio


class Tasks:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def submit(self, task: Any) -> None:
        self.calls.append(f"submit:{task.intent}/{task.state}")
        task.context["submitted"] = True

    async def notify(self, task: Any) -> None:
        self.calls.append("notify")

    def transfer(self, task: Any) -> None:
        self.calls.append("transfer")

    def close(self, task: Any) -> None:
        self.calls.append("close")

    def broken(self, task: Any) -> None:
        raise RuntimeError("core banking is down")


CONFIRM_RULES = [
    {"intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT", "match_pattern": "ready",
     "action": "SET_STATE", "action_value": "CONFIRM"},
    {"intent_code": "LOAN", "state_code": "CONFIRM", "rule_type": "JSON_PATH",
     "match_pattern": "$[?(@.inputParams.pending_action_result == 'EXECUTED')]", "action": "SET_STATE",
     "action_value": "DONE"},
    {"intent_code": "LOAN", "state_code": "CONFIRM", "rule_type": "JSON_PATH",
     "match_pattern": "$[?(@.inputParams.pending_action_result == 'REJECTED')]", "action": "SET_STATE",
     "action_value": "CANCELLED"},
]
CONFIRM_RESPONSES = [{"intent_code": "LOAN", "state_code": s, "exact_text": f"in {s}: {{{{pending_action_result}}}}"}
                     for s in ("CONFIRM", "DONE", "CANCELLED")]


def confirm_pack(actions: list[dict[str, Any]] | None = None, **settings: Any) -> dict[str, Any]:
    rows = actions or [{"intent_code": "LOAN", "state_code": "CONFIRM", "action_key": "SUBMIT", "bean_name": "tasks",
                        "method_names": "submit,notify", "priority": 1, "description": "submit the loan"}]
    return pack(ce_rule=CONFIRM_RULES, ce_response=CONFIRM_RESPONSES, ce_pending_action=rows,
                settings={"flow": {"action-lifecycle": settings}} if settings else {})


async def to_confirm(engine: Any) -> str:
    first = await engine.aprocess("loan")
    second = await engine.aprocess("ready", first.conversation_id)
    assert second.state == "CONFIRM"
    return first.conversation_id


async def test_confirm_executes_the_action_once(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, confirm_pack(), tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)
        result = await engine.aprocess("yes", cid)
        assert (result.state, result.payload.value) == ("DONE", "in DONE: EXECUTED")
        assert tasks.calls == ["submit:LOAN/CONFIRM", "notify"]
        assert result.context["submitted"] is True
        runtime = result.context["pending_action_runtime"]
        assert (runtime["status"], runtime["action_key"]) == ("EXECUTED", "SUBMIT")
        events = await turn_events(engine, cid)
        executed = payload_of(events, "PENDING_ACTION_EXECUTED")
        assert (executed["pendingActionRef"], executed["taskMethods"]) == ("tasks:submit,notify", ["submit", "notify"])
        lifecycle = [e.payload["event"] for e in events if e.stage == "PENDING_ACTION_LIFECYCLE"]
        assert lifecycle == ["OPEN", "IN_PROGRESS"]
        await engine.aprocess("yes", cid)  # DONE has no pending action: nothing runs again
        assert tasks.calls == ["submit:LOAN/CONFIRM", "notify"]
        assert (await engine.astate(cid))["input_params"].get("pending_action_result") is None  # turn-scoped


async def test_reject_records_the_rejection_and_runs_nothing(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, confirm_pack(), tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)
        result = await engine.aprocess("no", cid)
        assert (result.state, result.payload.value) == ("CANCELLED", "in CANCELLED: REJECTED")
        assert tasks.calls == []
        assert result.context["pending_action_runtime"]["status"] == "REJECTED"
        assert "PENDING_ACTION_REJECTED" in await turn_stages(engine, cid)


async def test_a_failing_task_is_a_failed_result_with_the_exception_audited(db_url: str) -> None:
    actions = [{"intent_code": "LOAN", "state_code": "CONFIRM", "action_key": "SUBMIT", "bean_name": "tasks",
                "method_names": "broken", "priority": 1}]
    async with engine_on(db_url, confirm_pack(actions), tasks={"tasks": Tasks()}) as engine:
        cid = await to_confirm(engine)
        result = await engine.aprocess("yes", cid)
        assert (result.state, result.payload.value) == ("CONFIRM", "in CONFIRM: FAILED")
        failed = payload_of(await turn_events(engine, cid), "PENDING_ACTION_FAILED")
        assert (failed["errorType"], failed["error"]) == ("RuntimeError", "core banking is down")


async def test_an_unknown_task_bean_fails_clearly(db_url: str) -> None:
    async with engine_on(db_url, confirm_pack(), tasks={}) as engine:
        cid = await to_confirm(engine)
        await engine.aprocess("yes", cid)
        failed = payload_of(await turn_events(engine, cid), "PENDING_ACTION_FAILED")
        assert "no task registered for bean 'tasks'" in failed["error"]


async def test_expiry_by_turns_blocks_execution_until_confirmed_again(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, confirm_pack(**{"ttl-turns": 2}), tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)  # the question is asked on turn 2
        for text in ("hmm", "let me think"):  # turns 3 and 4 are within the TTL
            await engine.aprocess(text, cid)
        late = await engine.aprocess("yes", cid)  # turn 5: more than 2 turns after the question
        assert tasks.calls == []
        assert (late.state, late.payload.value) == ("CONFIRM", "in CONFIRM: EXPIRED")
        events = await turn_events(engine, cid)
        assert [e.payload["event"] for e in events if e.stage == "PENDING_ACTION_LIFECYCLE"] == [
            "EXPIRED", "REOPENED_AFTER_EXPIRY"]
        assert payload_of(events, "PENDING_ACTION_SKIPPED")["reason"] == "EXPIRED"
        again = await engine.aprocess("yes", cid)  # confirmed again while the re-opened action is valid
        assert again.state == "DONE" and tasks.calls == ["submit:LOAN/CONFIRM", "notify"]


async def test_expiry_noticed_without_an_answer_is_reported_and_stays_until_answered(db_url: str) -> None:
    tasks = Tasks()
    async with engine_on(db_url, confirm_pack(**{"ttl-turns": 1}), tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)  # asked on turn 2
        await engine.aprocess("hmm", cid)  # turn 3: within the TTL
        noticed = await engine.aprocess("let me think", cid)  # turn 4: the TTL ran out, no yes/no
        assert noticed.payload.value == "in CONFIRM: EXPIRED"  # reported on the turn it is noticed
        assert noticed.context["pending_action_runtime"]["status"] == "EXPIRED"
        events = await turn_events(engine, cid)
        assert [e.payload["event"] for e in events if e.stage == "PENDING_ACTION_LIFECYCLE"] == ["EXPIRED"]
        quiet = await engine.aprocess("still thinking", cid)  # not re-opened with a fresh TTL
        assert quiet.context["pending_action_runtime"]["status"] == "EXPIRED"
        assert quiet.payload.value == "in CONFIRM: "  # the expiry was reported already
        answer = await engine.aprocess("yes", cid)  # the answer to the expired question is refused
        assert (answer.state, answer.payload.value, tasks.calls) == ("CONFIRM", "in CONFIRM: EXPIRED", [])
        events = await turn_events(engine, cid)
        assert [e.payload["event"] for e in events if e.stage == "PENDING_ACTION_LIFECYCLE"] == [
            "REOPENED_AFTER_EXPIRY"]
        assert payload_of(events, "PENDING_ACTION_SKIPPED")["reason"] == "EXPIRED"
        again = await engine.aprocess("yes", cid)  # confirmed after the action was presented again
        assert again.state == "DONE" and tasks.calls == ["submit:LOAN/CONFIRM", "notify"]


async def test_expiry_by_minutes(db_url: str) -> None:
    clock = {"ms": 1_000_000.0}
    tasks = Tasks()
    async with engine_on(db_url, confirm_pack(**{"ttl-minutes": 5}), tasks={"tasks": tasks},
                         clock=lambda: clock["ms"]) as engine:
        cid = await to_confirm(engine)
        await engine.aprocess("hmm", cid)  # opens the runtime
        clock["ms"] += 6 * 60_000
        late = await engine.aprocess("yes", cid)
        assert late.payload.value == "in CONFIRM: EXPIRED" and tasks.calls == []
        assert (await engine.aprocess("yes", cid)).state == "DONE"


TIED = [{"intent_code": "LOAN", "state_code": "CONFIRM", "action_key": "TRANSFER", "bean_name": "tasks",
         "method_names": "transfer", "priority": 5, "description": "transfer the balance"},
        {"intent_code": "LOAN", "state_code": "CONFIRM", "action_key": "CLOSE", "bean_name": "tasks",
         "method_names": "close", "priority": 5, "description": "close the account"}]
ASK_RESPONSE = [{"intent_code": "LOAN", "state_code": "CONFIRM", "exact_text": "{{pendingClarificationQuestion}}",
                 "priority": 1}]


async def test_tied_actions_ask_and_the_choice_comes_back_as_a_key(db_url: str) -> None:
    tasks = Tasks()
    data = confirm_pack(TIED)
    data["ce_response"].extend(ASK_RESPONSE)
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)
        asked = await engine.aprocess("yes", cid)
        assert tasks.calls == []
        assert asked.payload.value == ("I found multiple actions. Which one should I execute: TRANSFER (transfer the "
                                       "balance), CLOSE (close the account)?")
        required = payload_of(await turn_events(engine, cid), "DISAMBIGUATION_REQUIRED")
        assert (required["candidateCount"], required["questionSource"]) == (2, "TEMPLATE")
        done = await engine.aprocess("yes", cid, input_params={"pending_action_key": "CLOSE"})
        assert tasks.calls == ["close"] and done.state == "DONE"


async def test_the_choice_can_come_back_as_a_reply_naming_an_option(db_url: str) -> None:
    tasks = Tasks()
    data = confirm_pack(TIED)
    data["ce_response"].extend(ASK_RESPONSE)
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)
        await engine.aprocess("yes", cid)
        done = await engine.aprocess("please transfer the balance", cid)
        assert tasks.calls == ["transfer"] and done.state == "DONE"
        assert "DISAMBIGUATION_RESOLVED" in await turn_stages(engine, cid)


async def test_the_disambiguation_question_can_come_from_the_llm(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    data = confirm_pack(TIED)
    data["ce_response"].extend(ASK_RESPONSE)
    data["ce_config"] = [{"config_type": "DisambiguationStep", "config_key": "ENABLE_LLM", "config_value": "true"}]
    llm = ScriptedLLM({"DISAMBIGUATION": lambda call: "Transfer, or close? " + str("TRANSFER" in call.user)},
                      default={"intent": None, "confidence": 0})
    async with engine_on(db_url, data, tasks={"tasks": Tasks()}, llm=llm) as engine:
        cid = await to_confirm(engine)
        assert (await engine.aprocess("yes", cid)).payload.value == "Transfer, or close? True"


SENSITIVE = {"flow": {"guardrail": {"require-approval-for-sensitive-actions": True,
                                    "sensitive-patterns": [r"\bwire\b", r"\btransfer\b"]}}}


async def test_guardrail_denies_then_approves_on_the_same_conversation(db_url: str) -> None:
    tasks = Tasks()
    actions = [{"intent_code": "LOAN", "state_code": "CONFIRM", "action_key": "WIRE", "bean_name": "tasks",
                "method_names": "transfer", "priority": 1}]
    rules = [{"intent_code": "LOAN", "state_code": "CONFIRM", "rule_type": "REGEX", "match_pattern": "wire",
              "action": "SET_DIALOGUE_ACT", "action_value": "AFFIRM", "phase": "POST_DIALOGUE_ACT"}]
    data = confirm_pack(actions)
    data["ce_rule"].extend(rules)
    data["settings"] = {**data["settings"], **SENSITIVE, "flow": {**data["settings"]["flow"], **SENSITIVE["flow"]}}
    async with engine_on(db_url, data, tasks={"tasks": tasks}) as engine:
        cid = await to_confirm(engine)
        denied = await engine.aprocess("wire it now", cid)
        assert tasks.calls == [] and denied.state == "CONFIRM"
        events = await turn_events(engine, cid)
        deny = payload_of(events, "GUARDRAIL_DENY")
        assert (deny["reason"], deny["sensitive"]) == ("SENSITIVE_ACTION_APPROVAL_REQUIRED", True)
        assert payload_of(events, "PENDING_ACTION_SKIPPED")["reason"] == "pending action skipped by guardrail"
        approved = await engine.aprocess("wire it now", cid, input_params={"approval_granted": True})
        assert tasks.calls == ["transfer"] and approved.state == "DONE"
        assert "GUARDRAIL_ALLOW" in await turn_stages(engine, cid)
        state = await engine.astate(cid)
        assert "guardrail_blocked" not in state["input_params"] and "approval_granted" not in state["input_params"]


async def test_guardrail_approval_from_the_context_and_sanitising(db_url: str) -> None:
    def approve(task: Any) -> None:
        task.context["approval"] = {"granted": "true"}

    rules = [{"phase": "POST_INTENT", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_TASK", "action_value": "a:approve"}]
    async with engine_on(db_url, pack(ce_rule=rules, settings=SENSITIVE), tasks={"a": {"approve": approve}}) as engine:
        first = await engine.aprocess("loan")
        await engine.aprocess("wire\t\tthe  money", first.conversation_id)
        events = await turn_events(engine, first.conversation_id)
        assert payload_of(events, "GUARDRAIL_ALLOW")["approvalGranted"] is True
        state = await engine.astate(first.conversation_id)
        assert state["input_params"] == {}


CONTAINERS = [{"intent_code": "LOAN", "state_code": "START", "page_id": 1, "section_id": 2, "container_id": 3,
               "input_param_name": "accounts"},
              {"intent_code": "ANY", "state_code": "ANY", "page_id": 9, "section_id": 9, "container_id": 9,
               "input_param_name": "banner"},
              {"intent_code": "LOAN", "state_code": "START", "page_id": 1, "section_id": 2, "container_id": 4,
               "input_param_name": "offers", "priority": 2}]


async def test_context_data_providers_by_scope_with_failures_audited(db_url: str) -> None:
    async def accounts(request: Any) -> list[str]:
        return [f"acct-for-{request.intent}", request.input_value]

    def offers(request: Any) -> Any:
        raise ConnectionError("offers service down")

    providers = {"1:2:3": accounts, "4": offers, "9": lambda request: {"text": "welcome"}}
    async with engine_on(db_url, pack(ce_container_config=CONTAINERS), container_providers=providers) as engine:
        greet = await engine.aprocess("hello")
        assert greet.context["container_data"] == {"banner": {"text": "welcome"}}  # ANY/ANY fallback
        loan = await engine.aprocess("loan", greet.conversation_id)
        assert loan.context["container_data"]["accounts"] == ["acct-for-LOAN", "loan"]
        events = await turn_events(engine, greet.conversation_id)
        failed = payload_of(events, "CONTAINER_DATA_FAILED")
        assert failed["inputParamName"] == "offers" and "offers service down" in failed["error"]
        assert payload_of(events, "CONTAINER_DATA_ATTACHED")["names"] == ["accounts"]


async def test_a_container_without_a_provider_is_audited_not_fatal(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_container_config=CONTAINERS[:1])) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "Loan started"
        failed = payload_of(await turn_events(engine, result.conversation_id), "CONTAINER_DATA_FAILED")
        assert "no context-data provider registered for container 1:2:3" in failed["error"]
