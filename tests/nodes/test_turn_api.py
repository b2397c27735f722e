"""What a step (built-in or a host's) works through: the Turn view of the state, the most specific row
in scope, and the verdict read from an LLM policy's reply (untrusted)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from convengine.catalog import names
from convengine.nodes.common import Step, most_specific
from convengine.nodes.policy_check import REASON_MAX_CHARS, verdict_of
from convengine.nodes.turn import Turn
from tests.helpers import engine_on, pack

# --- Turn: reads fall through, writes are collected, the incoming state is never mutated -------------


def turn_on(state: dict[str, Any]) -> Turn:
    return Turn(state, ctx=None, step="host")  # type: ignore[arg-type]  # no engine service is used here


def test_writes_go_to_the_update_and_leave_the_incoming_state_alone() -> None:
    state: dict[str, Any] = {"intent": "LOAN", "state": "START", "params": {"a": 1},
                             "context": {"form": {"amount": 5}}}
    turn = turn_on(state)
    turn.params["b"] = 2
    turn.context["form"]["amount"] = 9
    assert state == {"intent": "LOAN", "state": "START", "params": {"a": 1}, "context": {"form": {"amount": 5}}}
    assert turn.changes() == {"params": {"a": 1, "b": 2}, "context": {"form": {"amount": 9}}}
    assert turn.read_params() == {"a": 1, "b": 2} and turn.read_context()["form"] == {"amount": 9}


def test_reads_see_the_update_first_and_none_reads_as_the_default() -> None:
    turn = turn_on({"intent": None, "payload": {"value": "old"}})
    assert turn.intent == "UNKNOWN" and turn.state == "UNKNOWN"
    assert turn.get("intent", "fallback") == "fallback"
    turn.set("payload", {"value": "new"})
    assert turn.get("payload") == {"value": "new"}
    assert turn.read_params() == {} and turn.read_context() == {}  # nothing written: nothing copied
    assert turn.changes() == {"payload": {"value": "new"}}


def test_state_changes_are_recorded_as_transitions_with_their_cause_and_step() -> None:
    turn = turn_on({"intent": "LOAN", "state": "START"})
    turn.set_state("START", cause="rule")  # no change: nothing recorded
    assert "transitions" not in turn.changes()
    turn.set_state("CONFIRM", cause="rule:SET_STATE")
    turn.set_state("DONE", cause="response")
    assert turn.state == "DONE"
    assert turn.get("transitions") == [
        {"from": "START", "to": "CONFIRM", "intent": "LOAN", "cause": "rule:SET_STATE", "step": "host"},
        {"from": "CONFIRM", "to": "DONE", "intent": "LOAN", "cause": "response", "step": "host"}]


def test_kept_params_are_listed_once() -> None:
    turn = turn_on({"params": {"x": 0}, "kept_params": ["x"]})
    turn.keep_params({"x": 1, "y": 2})
    turn.keep_params({"y": 3})
    assert turn.read_params() == {"x": 1, "y": 3}
    assert turn.get("kept_params") == ["x", "y"]


def test_the_schema_json_is_the_context_restricted_to_the_schema_fields() -> None:
    turn = turn_on({"context": {"amount": 5, "other": 1}, "schema_facts": {"properties": ["amount", "term"]}})
    assert turn.schema_json() == {"amount": 5}


async def test_a_host_step_writes_through_the_turn_and_the_next_turn_reads_it(db_url: str) -> None:
    seen: list[Any] = []

    def count_visits(turn: Any) -> None:
        seen.append(turn.read_context().get("visits"))
        turn.context["visits"] = (turn.read_context().get("visits") or 0) + 1
        turn.params["scratch"] = "this turn only"

    async with engine_on(db_url, pack(), steps=[Step("count", count_visits, after=names.AUDIT_USER_INPUT)]) as engine:
        first = await engine.aprocess("hello")
        second = await engine.aprocess("hello", first.conversation_id)
        state = await engine.astate(first.conversation_id)
    assert seen == [None, 1] and second.context["visits"] == 2
    assert state["input_params"] == {"scratch": "this turn only"}  # a host step's params persist like a rule's


# --- the most specific row in scope ------------------------------------------------------------------


@dataclass
class Row:
    name: str
    intent_code: str | None
    state_code: str | None
    priority: int = 1
    enabled: bool = True


def pick(rows: list[Row], intent: str = "LOAN", state: str = "START") -> str | None:
    found = most_specific(rows, intent, state, tie=lambda r: -r.priority)
    return found.name if found else None


def test_the_exact_intent_and_state_win_over_wildcards() -> None:
    rows = [Row("any", "ANY", "ANY"), Row("intent", "LOAN", "ANY"), Row("exact", "LOAN", "START"),
            Row("state", "ANY", "START")]
    assert pick(rows) == "exact"
    assert pick(rows[:2]) == "intent"
    assert pick([Row("other", "BILLING", "START"), Row("any", "ANY", "ANY")]) == "any"


def test_ties_go_to_the_tie_breaker_and_disabled_rows_are_out() -> None:
    rows = [Row("second", "LOAN", "START", priority=2), Row("first", "LOAN", "START", priority=1),
            Row("off", "LOAN", "START", priority=0, enabled=False)]
    assert pick(rows) == "first"
    assert pick([Row("off", "LOAN", "START", enabled=False)]) is None


# --- an LLM policy's verdict ----------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "violates", "error"), [
    ({"violates": True, "reason": "asks for a password"}, True, None),
    ({"violates": False}, False, None),
    ({"violates": "yes"}, None, "reply has no boolean 'violates'"),
    ({"violates": 1}, None, "reply has no boolean 'violates'"),
    ({}, None, "reply has no boolean 'violates'"),
    ([{"violates": True}], None, "reply is a JSON list, not an object"),
    ("true", None, "reply is a JSON str, not an object"),
])
def test_only_a_boolean_violates_decides(reply: Any, violates: bool | None, error: str | None) -> None:
    verdict = verdict_of(reply)
    assert (verdict.violates, verdict.error) == (violates, error)


def test_the_reason_is_bounded_and_must_be_text() -> None:
    assert verdict_of({"violates": True, "reason": "x" * 5000}).reason == "x" * REASON_MAX_CHARS
    assert verdict_of({"violates": True, "reason": {"nested": "object"}}).reason is None
