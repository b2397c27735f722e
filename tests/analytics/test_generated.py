"""On tens of thousands of generated turns (bench/analytics.py's generator, bulk-inserted), every
number of Engine.stats equals the test's own tally of the rows it inserted, per intent, state and day,
in total, in a window and per owner; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench.analytics import END_STATE, Generated, generate, insert
from convengine.engine import Engine
from tests.analytics.scenario import assert_rows_equal, numbers

pytestmark = pytest.mark.asyncio
TURNS = 20_000
NOW = datetime.now(UTC)


def _day(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d")


def _key(row: dict[str, Any], dims: tuple[str, ...], time: str) -> tuple[str, ...]:
    values = {"intent": row["intent_code"], "state": row["state_code"], "day": _day(row[time])}
    return tuple(values[d] for d in dims)


def tally(data: Generated, dims: tuple[str, ...], since: datetime | None = None,
          owner: str | None = None) -> dict[tuple[str, ...], dict[str, Any]]:
    """The numbers, counted in Python from the inserted rows."""
    owners = {c["conversation_id"]: c["owner_id"] for c in data.conversations}
    mine = lambda row, time: ((owner is None or owners[row["conversation_id"]] == owner)
                              and (since is None or row[time] >= since))
    rows: dict[tuple[str, ...], dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    cids: dict[tuple[str, ...], set[str]] = defaultdict(set)
    handed: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for s in data.steps:
        if s["undone"] or not mine(s, "created_at"):
            continue
        key = _key(s, dims, "created_at")
        cids[key].add(s["conversation_id"])
        if s["handoff"]:
            handed[key].add(s["conversation_id"])
        row = rows[key]
        for name, add in (("turns", 1), ("fallback_turns", s["fallback"]), ("unknown_turns", s["intent_code"] == "UNKNOWN"),
                          ("llm_calls", s["llm_calls"]), ("input_tokens", s["input_tokens"]),
                          ("output_tokens", s["output_tokens"]), ("estimated_cost", s["llm_cost"])):
            row[name] += add
    for key, found in cids.items():
        rows[key]["conversations"], rows[key]["handoffs"] = len(found), len(handed[key])
    ever_handed = {s["conversation_id"] for s in data.steps if s["handoff"] and not s["undone"]}
    for c in data.conversations:
        if mine(c, "updated_at"):
            row, ended = rows[_key(c, dims, "updated_at")], c["lifecycle"] == "ENDED"
            row["ended"] += ended
            row["contained"] += ended and c["conversation_id"] not in ever_handed
            row["dropped_off"] += not ended and c["conversation_id"] not in ever_handed
    for f in data.feedback:
        if mine(f, "created_at"):
            rows[_key(f, dims, "created_at")]["feedback_up" if f["feedback_type"] == "THUMBS_UP" else "feedback_down"] += 1
    zero = dict.fromkeys(("conversations", "turns", "ended", "dropped_off", "handoffs", "contained", "fallback_turns",
                          "unknown_turns", "feedback_up", "feedback_down", "llm_calls", "input_tokens",
                          "output_tokens", "estimated_cost"), 0)
    return {k: {**zero, **v} for k, v in rows.items()}


async def test_stats_of_generated_turns_equal_the_tests_own_tally(db_url: str) -> None:
    data = generate(TURNS, now=NOW)
    insert(db_url, data)
    assert any(c["state_code"] == END_STATE for c in data.conversations)
    week = NOW - timedelta(days=7)
    async with await Engine.aopen(db_url) as engine:
        for by, since, owner in (("intent", None, None), ("state", None, None), ("day", None, None),
                                 ("intent,day", week, None), ("intent", week, "key:a")):
            found = await engine.astats(by=by, since=since, owner=owner)
            dims = tuple(by.split(","))
            got = {tuple(getattr(r, d) for d in dims): numbers(r) for r in found.rows}
            assert_rows_equal(got, tally(data, dims, since, owner))
            assert_rows_equal({(): numbers(found.total)}, tally(data, (), since, owner))
