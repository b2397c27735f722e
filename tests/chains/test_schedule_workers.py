"""A due ``schedule`` step fires once when two workers (two engines on one database) poll at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from convengine.catalog import stages
from convengine.chains import Chains
from convengine.chains.store import now
from tests.chains.support import chain_pack, step
from tests.helpers import engine_on


async def test_a_due_schedule_fires_once_across_two_workers(db_url: str) -> None:
    data = chain_pack(step("later", "schedule", delay_s=60), step("tell", "notify", text="fired"))
    async with engine_on(db_url, data) as one, engine_on(db_url, None) as two:
        first, second = Chains(one, worker="worker-1"), Chains(two, worker="worker-2")
        runs = [await first.astart("C") for _ in range(3)]
        for run in runs:
            await first.store.update_run(run.run_id, due_at=now() - timedelta(seconds=1))
        fired = await asyncio.gather(*(c.arun_due() for c in (first, second, first, second)))
        taken = [r.run_id for batch in fired for r in batch]
        assert sorted(taken) == sorted(r.run_id for r in runs)  # each run once, by one worker or the other
        for run in runs:
            view = await first.aget(run.run_id)
            assert view.status == "COMPLETED"
            assert [(s["step"], s["status"]) for s in view.steps] == [("later", "DONE"), ("tell", "DONE")]
            trail = [e.stage for e in await one.aaudit(run.conversation_id)]
            assert trail.count(stages.CHAIN_RESUMED) == 1 and trail.count(stages.CHAIN_NOTIFY) == 1
        assert await second.arun_due() == [] and await first.arun_due() == []


async def test_a_run_whose_worker_was_lost_is_taken_again_after_its_claim_lapses(db_url: str) -> None:
    data = chain_pack(step("a", "notify", text="one"), step("b", "notify", text="two"))
    async with engine_on(db_url, data) as engine:
        chains = Chains(engine, worker="survivor")
        run = await chains.astart("C")
        # as if a worker had claimed it and died before it ran a step
        await chains.store.update_run(run.run_id, status="RUNNING", claimed_by="lost",
                                      claimed_until=now() - timedelta(seconds=1))
        again = await chains.arun_due()
        assert [r.status for r in again] == ["COMPLETED"]
        assert [s["step"] for s in again[0].steps] == ["a", "b"]  # each step once


async def test_a_chain_with_every_s_is_started_once_per_period_across_two_workers(db_url: str) -> None:
    data = chain_pack(step("tell", "notify", text="hourly report"))
    data["ce_chain"][0]["every_s"] = 3600
    async with engine_on(db_url, data) as one, engine_on(db_url, None) as two:
        first, second = Chains(one, worker="worker-1"), Chains(two, worker="worker-2")
        fired = await asyncio.gather(first.arun_due(), second.arun_due(), first.arun_due())
        started = [r for batch in fired for r in batch]
        assert len(started) == 1 and started[0].trigger == "schedule" and started[0].status == "COMPLETED"
        assert await second.arun_due() == []  # the same period: nothing new
        assert [r.run_id for r in await first.aruns()] == [started[0].run_id]
