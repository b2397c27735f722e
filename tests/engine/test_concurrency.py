"""One writer per conversation: the turns of a conversation never run at the same time, in one engine
or in two engines on the same database (PostgreSQL: an advisory lock; SQLite: a file lock), while
different conversations run side by side; admission caps how many turns a process runs at once.
Nothing is left held after the turns, whatever way they ended (both backends)."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import Any

import pytest

from convengine.engine import Engine
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio


class Overlap:
    """A step that stays a moment in each turn and records how many turns of each conversation, and in
    all, were inside it at once."""

    def __init__(self, pause_s: float = 0.03, company: int = 1) -> None:
        self.pause_s = pause_s
        self.company = company
        """Each turn waits (up to a second) until this many turns are inside, so a loaded machine that
        starts turns slowly still shows whether they may overlap."""
        self.inside: dict[str, int] = defaultdict(int)
        self.most: dict[str, int] = defaultdict(int)
        self.total = self.most_total = 0

    async def run(self, turn: Any) -> None:
        cid = turn.conversation_id
        self.inside[cid] += 1
        self.total += 1
        self.most[cid] = max(self.most[cid], self.inside[cid])
        self.most_total = max(self.most_total, self.total)
        try:
            deadline = asyncio.get_running_loop().time() + 1.0
            while self.total < self.company and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.005)
            await asyncio.sleep(self.pause_s)
            if turn.user_text == "fail":
                raise RuntimeError("this turn fails")
        finally:
            self.inside[cid] -= 1
            self.total -= 1

    def step(self) -> Step:
        return Step("overlap", self.run, after="rules")


async def test_turns_of_one_conversation_never_overlap_but_conversations_run_side_by_side(db_url: str) -> None:
    seen = Overlap()
    async with engine_on(db_url, pack(), steps=[seen.step()]) as engine:
        cids = [str(uuid.uuid4()) for _ in range(4)]
        await asyncio.gather(*(engine.aprocess(f"loan {n}", cid) for cid in cids for n in range(4)))
        assert all(seen.most[cid] == 1 for cid in cids), dict(seen.most)
        assert seen.most_total > 1  # the four conversations did run at the same time
        assert [(await engine.astate(cid))["turn"] for cid in cids] == [4, 4, 4, 4]
        assert engine.runtime.locks.held() == 0


async def test_two_engines_on_one_database_take_turns_on_a_conversation(db_url: str) -> None:
    seen = Overlap()  # shared by both engines: it sees the turns of both
    async with engine_on(db_url, pack(), steps=[seen.step()]) as first, \
            engine_on(db_url, None, steps=[seen.step()]) as second:
        cid = str(uuid.uuid4())
        results = await asyncio.gather(*(engine.aprocess(f"loan {n}", cid) for n in range(4)
                                         for engine in (first, second)))
        assert seen.most[cid] == 1
        assert sorted(r.turn for r in results) == list(range(1, 9))  # each saw the other's committed turn
        assert len(await second.ahistory(cid)) == 8
        assert (await first.astate(cid))["turn"] == 8


async def test_a_failed_turn_lets_the_next_turn_of_its_conversation_run_at_once(db_url: str) -> None:
    seen = Overlap()
    async with engine_on(db_url, pack(), steps=[seen.step()], turn_lock_timeout_s=5) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        outcomes = await asyncio.gather(engine.aprocess("fail", cid), engine.aprocess("loan", cid),
                                        engine.aprocess("fail", cid), engine.aprocess("hello", cid),
                                        return_exceptions=True)
        assert [type(o).__name__ for o in outcomes if isinstance(o, BaseException)] == ["StepError"] * 2
        assert sorted(o.turn for o in outcomes if not isinstance(o, BaseException)) == [2, 3]
        assert seen.most[cid] == 1
        assert engine.runtime.locks.held() == 0 and engine.runtime.gate.running == 0


async def test_admission_caps_the_turns_a_process_runs_at_once_across_conversations(db_url: str) -> None:
    seen = Overlap(pause_s=0.02, company=2)
    async with engine_on(db_url, pack(), steps=[seen.step()], admission={"max_turns": 2}) as engine:
        gate = engine.runtime.gate
        assert gate.limits.max_turns == 2
        results = await asyncio.gather(*(engine.aprocess("hello") for _ in range(8)))
        assert len({r.conversation_id for r in results}) == 8 and all(r.turn == 1 for r in results)
        assert seen.most_total == 2  # never more than two at once, and the cap was reached
        assert (gate.running, gate.waiting) == (0, 0)


async def test_undo_waits_for_the_running_turn_of_its_conversation(db_url: str) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def hold(turn: Any) -> None:
        if turn.user_text == "slow loan":
            entered.set()
            await release.wait()

    async with engine_on(db_url, pack(), steps=[Step("hold", hold, after="rules")]) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        running = asyncio.create_task(engine.aprocess("slow loan", cid))
        await asyncio.wait_for(entered.wait(), 10)
        undo = asyncio.create_task(engine.aundo(cid))
        await asyncio.sleep(0.2)
        assert not undo.done()  # it waits for the turn to commit...
        release.set()
        assert (await running).turn == 2
        await undo  # ...then takes back that turn, not the one before it
        state = await engine.astate(cid)
        assert (state["turn"], state["intent"]) == (1, "GREETING")


async def test_the_sync_api_serialises_threads_on_one_conversation(db_url: str) -> None:
    seen = Overlap()
    engine = await asyncio.to_thread(Engine.open, db_url, pack=pack(), steps=[seen.step()])
    try:
        cid = str(uuid.uuid4())
        results = await asyncio.gather(*(asyncio.to_thread(engine.process, f"loan {n}", cid) for n in range(5)))
        assert sorted(r.turn for r in results) == [1, 2, 3, 4, 5]
        assert seen.most[cid] == 1
    finally:
        await asyncio.to_thread(engine.close)
