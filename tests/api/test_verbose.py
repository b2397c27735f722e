"""ce_verbose rows become VERBOSE progress events while a turn runs (Python API, both backends).

Rows are written the way ConvEngine's seed data writes them: steps named by ConvEngine's Java
classes (``RulesStep``, ``IntentResolutionStep``), REGEX and JSON_PATH step matches, a rule id, a
tool code. The events are live only: ``ce_audit`` never stores them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from convengine import Engine
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

SEED_STYLE = [
    {"verbose_id": 1, "intent_code": "ANY", "state_code": "ANY", "step_match": "REGEX", "step_value": ".*Step$",
     "determinant": "STEP_ENTER", "message": "Agent is processing your request.",
     "error_message": "Failed while starting step execution.", "priority": 100},
    {"verbose_id": 3, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT", "step_value": "RulesStep",
     "determinant": "RULE_MATCH", "message": "Applying matching rule...", "priority": 20},
    {"verbose_id": 9, "intent_code": "ANY", "state_code": "ANY", "step_match": "REGEX", "step_value": ".*Step$",
     "determinant": "STEP_ERROR", "message": "Step execution failed.", "error_message": "{{stepName}} broke.",
     "priority": 5},
    {"verbose_id": 40, "intent_code": "LOAN", "state_code": "ANY", "step_match": "EXACT",
     "step_value": "IntentResolutionStep", "determinant": "STEP_EXIT", "message": "Intent is {{intent}}.",
     "priority": 10},
    {"verbose_id": 41, "intent_code": "ANY", "state_code": "ANY", "step_match": "JSON_PATH",
     "step_value": "$[?(@.actionValue.loan_seen == true)]", "determinant": "RULE_APPLIED", "rule_id": 77,
     "message": "Rule {{ruleId}} remembered the loan.", "priority": 10},
    {"verbose_id": 42, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT", "step_value": "rules",
     "determinant": "RULE_APPLIED", "rule_id": 78, "message": "Never: rule 78 does not exist.", "priority": 1},
    {"verbose_id": 50, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
     "step_value": "ToolOrchestrationStep", "determinant": "TOOL_ORCHESTRATION_REQUEST", "message": "Calling a tool.",
     "priority": 30},
    {"verbose_id": 51, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
     "step_value": "ToolOrchestrationStep", "determinant": "TOOL_ORCHESTRATION_REQUEST", "tool_code": "crm.lookup",
     "message": "Looking up customer {{inputParams.tool_request.args.customerId}}.", "priority": 30},
    {"verbose_id": 52, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
     "step_value": "ToolOrchestrationStep", "determinant": "TOOL_ORCHESTRATION_REQUEST", "tool_code": "other.tool",
     "message": "Never: another tool.", "priority": 1},
]
RULES = [{"rule_id": 77, "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT", "match_pattern": "ANY",
          "action": "SET_INPUT_PARAM", "action_value": '{"loan_seen": true}'}]
TOOLS = [{"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "ANY",
          "state_code": "ANY", "description": "Look up the customer"}]


def verbose_pack() -> dict[str, Any]:
    return pack(ce_verbose=SEED_STYLE, ce_rule=RULES, ce_mcp_tool=TOOLS)


async def run(engine: Engine, text: str, cid: str | None = None, **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
    """One turn; the verbose messages streamed during it."""
    subscription = engine.subscribe()
    try:
        result = await engine.aprocess(text, cid, **kwargs)
    finally:
        engine.bus.unsubscribe(subscription)
    events = []
    while not subscription.queue.empty():
        event = subscription.queue.get_nowait()
        if event.stage == "VERBOSE":
            events.append(event.payload["verbose"])
    return result, events


def texts(events: list[dict[str, Any]], determinant: str) -> list[tuple[str, str]]:
    return [(e["stepName"], e["text"]) for e in events if e["determinant"] == determinant]


async def test_seed_rows_naming_java_steps_speak_on_their_steps(db_url: str) -> None:
    async with engine_on(db_url, verbose_pack()) as engine:
        result, events = await run(engine, "a loan please")
        assert (result.intent, result.state) == ("LOAN", "START")
        entered = texts(events, "STEP_ENTER")
        assert ("IntentResolutionStep", "Agent is processing your request.") in entered
        assert ("RulesStep", "Agent is processing your request.") in entered
        assert len(entered) >= 10 and all(step.endswith("Step") for step, _ in entered)
        assert texts(events, "STEP_EXIT") == [("IntentResolutionStep", "Intent is LOAN.")]  # intent-scoped row
        assert texts(events, "RULE_MATCH") == [("RulesStep", "Applying matching rule...")]
        rule = next(e for e in events if e["determinant"] == "RULE_APPLIED")
        assert (rule["verboseId"], rule["ruleId"], rule["text"]) == (41, 77, "Rule 77 remembered the loan.")
        assert (rule["eventType"], rule["level"], rule["intent"], rule["state"]) == ("VERBOSE_PROGRESS", "INFO",
                                                                                     "LOAN", "START")
        assert rule["metadata"]["theme"] == "progress" and rule["metadata"]["conversationId"] == result.conversation_id
        assert "VERBOSE" not in [e.stage for e in await engine.aaudit(result.conversation_id)]


async def test_rows_scoped_to_another_intent_or_rule_stay_silent(db_url: str) -> None:
    async with engine_on(db_url, verbose_pack()) as engine:
        _, events = await run(engine, "hello")
        assert texts(events, "STEP_EXIT") == []  # row 40 is for LOAN only
        assert texts(events, "RULE_APPLIED") == []  # rule 77 is scoped on LOAN/START
        assert "Never" not in " ".join(e["text"] for e in events)


async def test_a_tool_code_row_wins_for_its_tool_only(db_url: str) -> None:
    async with engine_on(db_url, verbose_pack(), tools={"crm.lookup": lambda args, ctx: {"name": "Ann"}}) as engine:
        request = {"tool_code": "crm.lookup", "args": {"customerId": "C123"}}
        _, events = await run(engine, "hello", input_params={"tool_request": request})
        calls = [e for e in events if e["determinant"] == "TOOL_ORCHESTRATION_REQUEST"]
        assert [(e["verboseId"], e["toolCode"], e["text"]) for e in calls] == [
            (51, "crm.lookup", "Looking up customer C123.")]


async def test_a_failing_step_streams_its_error_message(db_url: str) -> None:
    def explode(turn: Any) -> None:
        raise RuntimeError("boom")

    broken = Step("explode", explode, after="rules", java_class="ExplodeStep")
    async with engine_on(db_url, verbose_pack(), steps=[broken]) as engine:
        subscription = engine.subscribe()
        with pytest.raises(Exception, match="boom"):
            await engine.aprocess("hello")
        events = []
        while not subscription.queue.empty():
            event = subscription.queue.get_nowait()
            if event.stage == "VERBOSE":
                events.append(event.payload["verbose"])
        failed = [e for e in events if e["determinant"] == "STEP_ERROR"]
        assert [(e["stepName"], e["level"], e["text"], e["metadata"]["theme"]) for e in failed] == [
            ("ExplodeStep", "ERROR", "ExplodeStep broke.", "danger")]


async def test_without_a_row_a_step_error_gets_convengine_fallback_text(db_url: str) -> None:
    def explode(turn: Any) -> None:
        raise RuntimeError("boom")

    async with engine_on(db_url, pack(), steps=[Step("explode", explode, after="rules")]) as engine:
        subscription = engine.subscribe()
        with pytest.raises(Exception, match="boom"):
            await engine.aprocess("hello")
        events = [e.payload["verbose"] for e in _drain(subscription) if e.stage == "VERBOSE"]
        assert [(e["verboseId"], e["text"]) for e in events] == [
            (None, "Something went wrong while processing explode.")]


def _drain(subscription: Any) -> list[Any]:
    out = []
    while not subscription.queue.empty():
        out.append(subscription.queue.get_nowait())
    return out


async def test_a_verbose_event_crosses_server_processes_intact() -> None:
    """What one process NOTIFYs another republishes as the same VERBOSE event (the PostgreSQL bridge)."""
    from convengine.api.notify import PgAuditBridge
    from convengine.api.routes import sse_event
    from convengine.audit import AuditBus
    from convengine.audit.collector import verbose_event

    body = {"verboseId": 3, "eventType": "VERBOSE_PROGRESS", "stepName": "RulesStep", "text": "Applying rule"}
    event = verbose_event("6b0c6f5e-8d2b-4c57-9d59-2f0b0f6a1c11", "rules", body)
    sender, receiving_bus = PgAuditBridge("postgresql://unused", AuditBus()), AuditBus()
    receiver = PgAuditBridge("postgresql://unused", receiving_bus)
    subscription = receiving_bus.subscribe()
    for chunk in sender._chunks([event]):
        receiver._receive(chunk)
    [received] = _drain(subscription)
    data = json.loads(sse_event(received)["data"])
    assert sse_event(received)["event"] == "VERBOSE"
    assert (data["eventType"], data["verbose"], data["payload"]) == ("VERBOSE", body, {"verbose": body})


async def test_a_failing_verbose_template_never_fails_the_turn(db_url: str) -> None:
    rows = [{"verbose_id": 7, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
             "step_value": "RulesStep", "determinant": "STEP_ENTER", "message": "{{ 1 // 0 }}", "priority": 1},
            {"verbose_id": 8, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
             "step_value": "MemoryStep", "determinant": "STEP_ENTER", "message": "{{ 'x' * 10**9 }}", "priority": 1}]
    async with engine_on(db_url, pack(ce_verbose=rows)) as engine:
        result, events = await run(engine, "hello")
        assert result.text == "Hello there" and events == []
