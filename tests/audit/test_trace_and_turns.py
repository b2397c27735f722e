"""Grouping a trail: the step/stage tree (ConvEngine's ``/audit/{id}/trace``), a trail split into turns
and a turn into steps, the stored row's compact ``_meta`` read back whole, on units and on an engine."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from convengine.audit import AuditEvent
from convengine.audit.events import expand_meta
from convengine.audit.trace import build_trace, empty_trace, step_tree
from convengine.audit.turns import last_turn, split_turns, turn_steps
from convengine.catalog import stages
from convengine.catalog.names import LOAD_OR_CREATE_CONVERSATION, PIPELINE_END_GUARD
from tests.helpers import engine_on, pack

CID = "c-1"
START = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Trail:
    """Builds events a millisecond apart."""

    def __init__(self, turn_id: str | None = None) -> None:
        self.events: list[AuditEvent] = []
        self.turn_id = turn_id

    def add(self, stage: str, turn_id: str | None = "same", **payload: Any) -> Trail:
        at = START + timedelta(milliseconds=len(self.events))
        self.events.append(AuditEvent(CID, stage, payload, at, audit_id=len(self.events) + 1,
                                      turn_id=self.turn_id if turn_id == "same" else turn_id))
        return self

    def enter(self, step: str, **kw: Any) -> Trail:
        return self.add(stages.STEP_ENTER, step=step, stepClass=step.title(), **kw)

    def exit(self, step: str, ms: Any = 3, **kw: Any) -> Trail:
        return self.add(stages.STEP_EXIT, step=step, durationMs=ms, **kw)


# --- the trace --------------------------------------------------------------------------------------


def test_stages_attach_to_the_step_running_when_they_were_emitted() -> None:
    trail = (Trail().add(stages.USER_INPUT, text="before any step").enter("rules").add(stages.RULE_MATCH)
             .enter("inner").add(stages.RULE_APPLIED).exit("inner").add(stages.ASSISTANT_OUTPUT).exit("rules", 12))
    trace = build_trace(CID, trail.events)
    assert trace["conversationId"] == CID
    assert [s["stage"] for s in trace["stages"]] == [e.stage for e in trail.events]  # every stage, in order
    rules, inner = trace["steps"]
    assert [s["stage"] for s in rules["stages"]] == [stages.RULE_MATCH, stages.ASSISTANT_OUTPUT]
    assert [s["stage"] for s in inner["stages"]] == [stages.RULE_APPLIED]
    assert (rules["step"], rules["stepClass"], rules["status"], rules["durationMs"]) == ("rules", "Rules", "OK", 12)
    assert rules["startedAt"] == START.replace(microsecond=1000).isoformat()
    assert rules["endedAt"] == trail.events[-1].created_at.isoformat()
    first = trace["stages"][0]
    assert first == {"auditId": 1, "stage": stages.USER_INPUT, "createdAt": START.isoformat(),
                     "payload": {"text": "before any step"}}


def test_a_step_error_closes_its_step_with_the_message() -> None:
    trail = Trail().enter("rules").enter("boom").add(stages.STEP_ERROR, step="boom", errorMessage=ValueError("bad"),
                                                     durationMs="7.9")
    steps = build_trace(CID, trail.events)["steps"]
    assert [(s["step"], s["status"]) for s in steps] == [("rules", "RUNNING"), ("boom", "ERROR")]
    assert steps[1]["error"] == "bad" and steps[1]["durationMs"] == 7  # whole milliseconds, as ConvEngine's Long
    assert steps[0]["endedAt"] is None and steps[0]["durationMs"] is None


def test_an_exit_closes_the_named_step_and_the_steps_opened_inside_it() -> None:
    trail = Trail().enter("outer").enter("inner").exit("outer").add(stages.ASSISTANT_OUTPUT)
    outer, inner = build_trace(CID, trail.events)["steps"]
    assert (outer["status"], inner["status"]) == ("OK", "RUNNING")  # inner never exited
    assert outer["stages"] == [] and inner["stages"] == []  # the last stage ran outside every step


def test_an_exit_naming_no_open_step_closes_the_innermost() -> None:
    trail = Trail().enter("outer").enter("inner").exit("unknown").add(stages.RULE_MATCH)
    outer, inner = build_trace(CID, trail.events)["steps"]
    assert (outer["status"], inner["status"]) == ("RUNNING", "OK")
    assert [s["stage"] for s in outer["stages"]] == [stages.RULE_MATCH]


@pytest.mark.parametrize(("raw", "millis"), [(4, 4), (4.99, 4), ("12", 12), (True, None), ("soon", None),
                                             (None, None), (float("inf"), None), ([1], None)])
def test_durations_are_whole_milliseconds_or_none(raw: Any, millis: int | None) -> None:
    steps = build_trace(CID, Trail().enter("s").exit("s", raw).events)["steps"]
    assert steps[0]["durationMs"] == millis


def test_skipped_steps_are_steps_of_their_own_only_when_asked() -> None:
    trail = Trail().enter("rules").add(stages.STEP_SKIPPED, step="mcp", reason="no tools").exit("rules")
    plain, _ = step_tree(trail.events)
    assert [s["step"] for s in plain] == ["rules"] and plain[0]["stages"][0]["stage"] == stages.STEP_SKIPPED
    with_skipped, _ = step_tree(trail.events, skipped=True)
    assert [(s["step"], s["status"], s.get("skipped")) for s in with_skipped] == [
        ("rules", "OK", None), ("mcp", "SKIPPED", "no tools")]
    assert with_skipped[0]["stages"] == []


def test_an_empty_trail_has_an_empty_trace() -> None:
    assert build_trace(CID, []) == empty_trace(CID) == {"conversationId": CID, "steps": [], "stages": []}


# --- turns ------------------------------------------------------------------------------------------


def test_turn_ids_split_a_trail_and_events_outside_a_turn_join_the_turn_before() -> None:
    trail = (Trail().add(stages.USER_INPUT, turn_id=None, note="before any turn")
             .add(stages.USER_INPUT, turn_id="t1").add(stages.ASSISTANT_OUTPUT, turn_id="t1")
             .add(stages.UNDO, turn_id=None).add(stages.USER_INPUT, turn_id="t2")
             .add(stages.MCP_USER_FEEDBACK, turn_id=None).add(stages.USER_INPUT, turn_id="t1"))
    turns = split_turns(trail.events)
    assert [[(e.stage, e.turn_id) for e in turn] for turn in turns] == [
        [(stages.USER_INPUT, "t1"), (stages.ASSISTANT_OUTPUT, "t1"), (stages.UNDO, None)],
        [(stages.USER_INPUT, "t2"), (stages.MCP_USER_FEEDBACK, None)],
        [(stages.USER_INPUT, "t1")],  # an id seen again after another turn starts a new group
    ]
    assert last_turn(trail.events) == turns[-1]


def test_without_turn_ids_a_turn_starts_at_its_first_step() -> None:
    trail = (Trail().add(stages.UNDO).enter(LOAD_OR_CREATE_CONVERSATION).exit(LOAD_OR_CREATE_CONVERSATION)
             .enter("rules").exit("rules").enter(LOAD_OR_CREATE_CONVERSATION).add(stages.USER_INPUT))
    turns = split_turns(trail.events)
    assert [len(t) for t in turns] == [4, 2]
    assert [s["step"] for s in turn_steps(turns[0])] == [LOAD_OR_CREATE_CONVERSATION, "rules"]
    assert split_turns([]) == [] and last_turn([]) == []
    assert split_turns(Trail().add(stages.UNDO).add(stages.USER_INPUT).events) == []  # no turn started


# --- compact rows ---------------------------------------------------------------------------------


def test_a_rows_compact_meta_expands_back_to_what_was_emitted() -> None:
    meta = {"stage": stages.RULE_APPLIED, "conversationId": CID, "emittedAt": START.isoformat(), "intent": "LOAN",
            "state": "START", "step": "rules", "turnId": "t1"}
    event = AuditEvent(CID, stages.RULE_APPLIED, {"intent": "LOAN", "ruleId": 4}, START, "rules", meta, turn_id="t1")
    row = event.row_payload()
    assert row["_meta"] == {"state": "START", "step": "rules", "turnId": "t1"}  # the columns and payload say the rest
    assert expand_meta(row["_meta"], event.stage, CID, START, event.payload) == meta
    assert event.stored_payload() == {"intent": "LOAN", "ruleId": 4, "_meta": meta}
    shown = event.to_dict()
    assert json.loads(shown["payloadJson"]) == event.stored_payload()
    assert (shown["stage"], shown["conversationId"], shown["createdAt"]) == (stages.RULE_APPLIED, CID, START.isoformat())


def test_meta_differing_from_the_row_is_kept_in_the_row() -> None:
    meta = {"stage": "OTHER", "conversationId": CID, "emittedAt": START.isoformat(), "intent": None, "state": None,
            "step": None, "turnId": None}
    event = AuditEvent(CID, stages.USER_INPUT, {"intent": "LOAN"}, START, meta=meta)
    row = event.row_payload()
    assert row["_meta"] == {"stage": "OTHER", "intent": None, "turnId": None}
    assert expand_meta(row["_meta"], event.stage, CID, START, event.payload) == meta
    assert AuditEvent(CID, stages.USER_INPUT, {"a": 1}).row_payload() == {"a": 1}  # no meta, nothing added


# --- on an engine -------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_engines_trail_groups_into_its_turns_and_each_turn_into_the_pipeline_steps(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = str(uuid.uuid4())
        for text in ("hello", "a loan please", "hello"):
            await engine.aprocess(text, cid)
        events = await engine.aaudit(cid)
        turns = split_turns(events)
        assert [[e.payload.get("text") for e in t if e.stage == stages.USER_INPUT] for t in turns] == [
            ["hello"], ["a loan please"], ["hello"]]
        assert sum(len(t) for t in turns) == len(events)  # every event belongs to one turn
        steps = [turn_steps(t) for t in turns]
        assert all(s[0]["step"] == LOAD_OR_CREATE_CONVERSATION and all(x["status"] == "OK" for x in s) for s in steps)
        assert all(s[-1]["step"] == PIPELINE_END_GUARD for s in steps)
        trace = await engine.atrace(cid)
        assert [x["step"] for x in trace["steps"]] == [x["step"] for s in steps for x in s]
        assert all(isinstance(x["durationMs"], int) for x in trace["steps"])
        assert [s["auditId"] for s in trace["stages"]] == [e.audit_id for e in events]  # stored order
