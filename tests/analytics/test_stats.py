"""Engine.stats equals the counts the test makes itself of conversations it ran through the public API
(a fallback, an UNKNOWN intent, a handoff, an ended conversation, an undone turn, feedback up and down,
scripted model calls with tokens), per intent, state and day and in total, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from convengine.catalog.errors import InvalidInputError
from tests.analytics.scenario import PACK, Seen, assert_rows_equal, numbers, run_script, scripted_llm
from tests.helpers import engine_on

pytestmark = pytest.mark.asyncio
IDLE = 0.001  # every conversation that neither ended nor was handed off has dropped off


async def _ran(db_url: str) -> tuple[Seen, dict[str, object]]:
    async with engine_on(db_url, PACK, llm=scripted_llm()) as engine:
        seen = await run_script(engine)
        found = {by: await engine.astats(by=by, idle_after_s=IDLE) for by in ("intent", "state", "day", "intent,state")}
        return seen, found


async def test_the_numbers_equal_what_the_conversations_did(db_url: str) -> None:
    seen, found = await _ran(db_url)
    kinds = {t.intent for t in seen.turns}
    assert {"UNKNOWN", "LOAN", "GOODBYE"} <= kinds and any(t.fallback for t in seen.turns)
    assert any(t.handoff for t in seen.turns) and any(t.tokens_in for t in seen.turns)
    for by, stats in found.items():
        dims = tuple(by.split(","))
        got = {tuple(getattr(r, d) for d in dims): numbers(r) for r in stats.rows}
        assert_rows_equal(got, seen.expected(dims))
        assert_rows_equal({(): numbers(stats.total)}, seen.expected(()))
    total = found["intent"].total
    assert total.containment_rate == pytest.approx(round(total.contained / total.conversations, 4))
    assert total.fallback_rate == pytest.approx(round(total.fallback_turns / total.turns, 4))


async def test_a_window_an_intent_and_an_owner_narrow_the_numbers(db_url: str) -> None:
    async with engine_on(db_url, PACK, llm=scripted_llm()) as engine:
        seen = await run_script(engine)
        later = datetime.now(UTC) + timedelta(hours=1)
        empty = await engine.astats(since=later, by="intent")
        assert empty.rows == [] and numbers(empty.total)["turns"] == 0
        before = await engine.astats(until=later, idle_after_s=IDLE)
        assert_rows_equal({(): numbers(before.total)}, seen.expected(()))
        loans = await engine.astats(intent="LOAN", by="intent", idle_after_s=IDLE)
        assert [r.intent for r in loans.rows] == ["LOAN"]
        assert_rows_equal({("LOAN",): numbers(loans.rows[0])}, {k: v for k, v in seen.expected(("intent",)).items()
                                                                if k == ("LOAN",)})
        served = max(v.number for v in engine.versions.list())
        on_version = await engine.astats(version=served, idle_after_s=IDLE)
        assert_rows_equal({(): numbers(on_version.total)}, seen.expected(()))
        assert numbers((await engine.astats(version=served + 1)).total)["turns"] == 0
        other = await engine.astats(owner="key:somebody-else")
        assert numbers(other.total)["turns"] == 0 and numbers(other.total)["feedback_up"] == 0


async def test_bad_queries_are_refused_naming_what_was_wrong(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, PACK) as engine:
        with pytest.raises(InvalidInputError, match="by"):
            await engine.astats(by="intent,week")
        with pytest.raises(InvalidInputError, match="time zone"):
            await engine.astats(since=datetime(2025, 1, 1))
        with pytest.raises(InvalidInputError, match="once"):
            await engine.astats(by="day,day")
        with pytest.raises(InvalidInputError, match="intent: .*NUL"):
            await engine.astats(intent="LOAN\x00")
