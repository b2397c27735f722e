"""Conversations run through the public API, and the analytics numbers the test computes itself from
what it saw (each turn's result and audit trail, the lifecycle, the feedback it gave)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from convengine.catalog import stages
from convengine.engine import Engine
from convengine.llm.scripted import LlmReply, ScriptedLLM
from tests.helpers import pack, turn_events

PRICE_IN, PRICE_OUT = 1000.0, 2000.0  # per million tokens of the scripted model
PACK = pack(
    settings={"conversation_memory": {"end_states": ["DONE"]},
              "llm": {"spend": {"prices": {"test-model": {"input_per_million": PRICE_IN,
                                                          "output_per_million": PRICE_OUT}}}}},
    ce_intent=[{"intent_code": "GOODBYE", "description": "bye"}],
    ce_intent_classifier=[{"intent_code": "GOODBYE", "state_code": "DONE", "rule_type": "REGEX",
                           "pattern": r"\bbye\b", "priority": 3}],
    ce_response=[{"intent_code": "GOODBYE", "state_code": "DONE", "exact_text": "Goodbye"}],
    ce_rule=[{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "ANY", "state_code": "ANY", "rule_type": "REGEX",
              "match_pattern": r"(?i)\bhuman\b", "action": "HANDOFF", "action_value": "asked", "priority": 1}],
)
PACK["ce_response"] = [r for r in PACK["ce_response"] if r.get("intent_code") != "LOAN"] + [
    {"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "TEXT",
     "derivation_hint": "answer"}]
PACK["ce_prompt_template"] = [{"intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
                               "system_prompt": "You help with loans.", "user_prompt": "{{user_input}}"}]

# (messages, feedback given after them, undo the last turn)
SCRIPT: tuple[tuple[tuple[str, ...], tuple[str, ...], bool], ...] = (
    (("hello", "bye"), ("THUMBS_UP",), False),                    # ends: contained
    (("hello", "I want a loan"), ("THUMBS_DOWN", "THUMBS_UP"), False),  # a model call; drops off
    (("blah blah",), (), False),                                   # UNKNOWN: a fallback (the agent asked)
    (("a human please", "are you there"), ("THUMBS_DOWN",), False),  # handed off
    (("I want a loan", "hello"), (), True),                        # its last turn undone
)


def scripted_llm() -> ScriptedLLM:
    return ScriptedLLM({
        "INTENT_AGENT": lambda call: LlmReply("{}", {"intent": "", "confidence": 0.0}, model="test-model",
                                              usage={"input_tokens": 50, "output_tokens": 5}),
        "RESPONSE_TEXT": lambda call: LlmReply("Loans are easy.", model="test-model",
                                               usage={"input_tokens": 100, "output_tokens": 20})})


@dataclass
class Turn:
    cid: str
    intent: str
    state: str
    day: str
    fallback: bool
    handoff: bool
    calls: int
    tokens_in: int
    tokens_out: int


@dataclass
class Seen:
    """Everything the test saw, tallied into the numbers ``Engine.stats`` must give."""

    turns: list[Turn] = field(default_factory=list)
    lifecycle: dict[str, str] = field(default_factory=dict)
    feedback: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(intent, state, day, type) of each feedback."""

    def expected(self, dims: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, Any]]:
        rows: dict[tuple[str, ...], dict[str, Any]] = defaultdict(_zero)
        cids: dict[tuple[str, ...], set[str]] = defaultdict(set)
        handed: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for t in self.turns:
            key = _key(t, dims)
            row = rows[key]
            cids[key].add(t.cid)
            row["turns"] += 1
            row["fallback_turns"] += t.fallback
            row["unknown_turns"] += t.intent == "UNKNOWN"
            row["llm_calls"] += t.calls
            row["input_tokens"] += t.tokens_in
            row["output_tokens"] += t.tokens_out
            row["estimated_cost"] += (t.tokens_in * PRICE_IN + t.tokens_out * PRICE_OUT) / 1e6
            if t.handoff:
                handed[key].add(t.cid)
        for key, found in cids.items():
            rows[key]["conversations"] = len(found)
            rows[key]["handoffs"] = len(handed[key])
        self._outcomes(rows, dims)
        for intent, state, day, kind in self.feedback:
            key = _key(Turn("", intent, state, day, False, False, 0, 0, 0), dims)
            rows[key]["feedback_up" if kind == "THUMBS_UP" else "feedback_down"] += 1
        return dict(rows)

    def _outcomes(self, rows: dict[tuple[str, ...], dict[str, Any]], dims: tuple[str, ...]) -> None:
        last: dict[str, Turn] = {}
        for t in self.turns:
            last[t.cid] = t
        handed = {t.cid for t in self.turns if t.handoff}
        for cid, t in last.items():
            row = rows[_key(t, dims)]
            ended = self.lifecycle[cid] == "ENDED"
            row["ended"] += ended
            row["contained"] += ended and cid not in handed
            row["dropped_off"] += not ended and cid not in handed


def _zero() -> dict[str, Any]:
    return dict.fromkeys(("conversations", "turns", "ended", "dropped_off", "handoffs", "contained",
                          "fallback_turns", "unknown_turns", "feedback_up", "feedback_down", "llm_calls",
                          "input_tokens", "output_tokens"), 0) | {"estimated_cost": 0.0}


def _key(t: Turn, dims: Iterable[str]) -> tuple[str, ...]:
    return tuple(getattr(t, d) for d in dims)


def turn_seen(cid: str, result: Any, events: list[Any]) -> Turn:
    """A turn as the test tallies it, from its result and its audit events."""
    names = [e.stage for e in events]
    calls = [e.payload for e in events if e.stage == stages.LLM_CALL]
    unmatched = stages.INTENT_RESOLVE_NO_CHANGE in names and result.intent == "UNKNOWN"
    return Turn(cid, result.intent, result.state, events[0].created_at.strftime("%Y-%m-%d"),
                fallback=unmatched or stages.INTENT_MISSING in names, handoff=stages.FLOW_HANDOFF in names,
                calls=len(calls), tokens_in=sum(c["usage"].get("input_tokens", 0) for c in calls),
                tokens_out=sum(c["usage"].get("output_tokens", 0) for c in calls))


async def run_script(engine: Engine, owner: str | None = None) -> Seen:
    """Run :data:`SCRIPT` through ``engine``'s public API and tally what happened."""
    seen = Seen()
    for messages, feedback, undo in SCRIPT:
        cid = None
        for text in messages:
            result = await engine.aprocess(text, cid, owner=owner)
            cid = result.conversation_id
            seen.turns.append(turn_seen(cid, result, await turn_events(engine, cid)))
        assert cid is not None
        for kind in feedback:
            last = seen.turns[-1]
            await engine.afeedback(cid, kind, owner=owner)
            seen.feedback.append((last.intent, last.state, datetime.now(UTC).strftime("%Y-%m-%d"), kind))
        if undo:
            await engine.aundo(cid, owner=owner)
            seen.turns.pop()
        seen.lifecycle[cid] = await engine.alifecycle(cid, owner=owner)
    return seen


NUMBERS = tuple(_zero())


def numbers(row: Any) -> dict[str, Any]:
    """A StatsRow's (or its JSON's) counted numbers, by their Python names."""
    if isinstance(row, dict):
        from convengine.analytics import StatsRow

        row = StatsRow.model_validate(row)
    return {name: getattr(row, name) for name in NUMBERS}


def assert_rows_equal(got: dict[tuple[str, ...], dict[str, Any]], want: dict[tuple[str, ...], dict[str, Any]]) -> None:
    assert set(got) == set(want), (sorted(got), sorted(want))
    for key, expected in want.items():
        actual = dict(got[key])
        assert actual.pop("estimated_cost") == pytest.approx(expected["estimated_cost"]), key
        assert actual == {k: v for k, v in expected.items() if k != "estimated_cost"}, key
