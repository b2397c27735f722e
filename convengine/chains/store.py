"""The rows of chain runs and their steps, and the claims that let exactly one worker run a run.

A worker claims a run with one guarded ``UPDATE ... WHERE status IN (...)``: on PostgreSQL the row
lock makes a second worker's update see the first one's result and match nothing; on SQLite the
database's write lock does the same. Due schedules are found with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so workers polling at once take different runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.catalog import chains as vocab
from convengine.db.models import CeChainRun, CeChainRunStep

RUN = CeChainRun.__table__
STEP = CeChainRunStep.__table__


_CLAIM_DUE_PG = sa.text(
    "WITH picked AS (SELECT run_id, status FROM ce_chain_run WHERE (status = :scheduled AND due_at <= :at) "
    "OR (status = :running AND claimed_until < :at) ORDER BY due_at LIMIT :limit FOR UPDATE SKIP LOCKED) "
    "UPDATE ce_chain_run AS r SET status = :running, claimed_by = :worker, claimed_until = :until, updated_at = :at "
    "FROM picked WHERE r.run_id = picked.run_id RETURNING r.run_id, picked.status")


def now() -> datetime:
    return datetime.now(UTC)


class RunStore:
    """ce_chain_run / ce_chain_run_step on the engine's database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def insert_run(self, row: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(sa.insert(RUN).values(**row, created_at=now(), updated_at=now()))

    async def insert_run_once(self, row: dict[str, Any]) -> bool:
        """Insert the run unless a run of that id exists: True for exactly one of competing workers."""
        async with self.engine.begin() as conn:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            result = await conn.execute(dialect.insert(RUN).values(**row, created_at=now(), updated_at=now())
                                        .on_conflict_do_nothing(index_elements=["run_id"]).returning(RUN.c.run_id))
            return result.first() is not None

    async def update_run(self, run_id: str, **values: Any) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(sa.update(RUN).where(RUN.c.run_id == run_id).values(**values, updated_at=now()))

    async def run(self, run_id: str) -> dict[str, Any] | None:
        async with self.engine.begin() as conn:
            row = (await conn.execute(sa.select(RUN).where(RUN.c.run_id == run_id))).first()
        return dict(row._mapping) if row else None

    async def runs(self, *, owner: str | None = None, status: str | None = None, chain: str | None = None,
                   limit: int = 50) -> list[dict[str, Any]]:
        query = sa.select(RUN).order_by(RUN.c.created_at.desc()).limit(limit)
        if owner is not None:
            query = query.where(RUN.c.owner_id == owner)
        if status is not None:
            query = query.where(RUN.c.status == status)
        if chain is not None:
            query = query.where(RUN.c.chain_code == chain)
        async with self.engine.begin() as conn:
            return [dict(r._mapping) for r in await conn.execute(query)]

    async def steps(self, run_id: str) -> list[dict[str, Any]]:
        async with self.engine.begin() as conn:
            rows = await conn.execute(sa.select(STEP).where(STEP.c.run_id == run_id).order_by(STEP.c.seq))
            return [dict(r._mapping) for r in rows]

    async def record_step(self, run_id: str, seq: int, step_id: str, step_type: str, status: str,
                          output: Any = None, error: str | None = None) -> None:
        """The step's one row (``seq`` is its place in the run): a step run again after a restart, or
        resumed after a pause, updates its row instead of adding one."""
        finished = None if status == vocab.STEP_WAITING else now()
        async with self.engine.begin() as conn:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            insert = dialect.insert(STEP).values(run_id=run_id, seq=seq, step_id=step_id, step_type=step_type,
                                                 status=status, output_json=output, error=error, started_at=now(),
                                                 finished_at=finished)
            await conn.execute(insert.on_conflict_do_update(
                index_elements=["run_id", "seq"],
                set_={c.name: insert.excluded[c.name] for c in (STEP.c.step_id, STEP.c.step_type, STEP.c.status,
                                                                STEP.c.output_json, STEP.c.error, STEP.c.finished_at)}))

    # --- claims -------------------------------------------------------------------------

    async def claim(self, run_id: str, statuses: Sequence[str], worker: str, ttl_s: float) -> bool:
        """Take the run for ``worker`` when its status is one of ``statuses`` (a SCHEDULED run only once
        due; a RUNNING run only once its claim lapsed). True for exactly one of competing workers."""
        at = now()
        due = sa.or_(RUN.c.status != vocab.SCHEDULED, RUN.c.due_at <= at)
        lapsed = sa.and_(RUN.c.status == vocab.RUNNING, RUN.c.claimed_until < at)
        taken = sa.or_(sa.and_(RUN.c.status.in_([s for s in statuses if s != vocab.RUNNING]), due),
                       lapsed if vocab.RUNNING in statuses else sa.false())
        async with self.engine.begin() as conn:
            result = await conn.execute(sa.update(RUN).where(RUN.c.run_id == run_id, taken).values(
                status=vocab.RUNNING, claimed_by=worker, claimed_until=at + timedelta(seconds=ttl_s), updated_at=at))
        return result.rowcount == 1

    async def claim_due(self, worker: str, ttl_s: float, limit: int) -> list[tuple[str, str]]:
        """Claim up to ``limit`` runs a scheduler may take now: SCHEDULED and due, or RUNNING with a lapsed
        claim (a worker lost mid-run). Returns ``(run_id, status before)`` of each run this worker took.
        On PostgreSQL one statement takes them (rows another worker is taking are skipped); on SQLite each
        candidate is taken by the guarded update of :meth:`claim`."""
        at = now()
        waiting = sa.and_(RUN.c.status == vocab.SCHEDULED, RUN.c.due_at <= at)
        lost = sa.and_(RUN.c.status == vocab.RUNNING, RUN.c.claimed_until < at)
        pick = sa.select(RUN.c.run_id, RUN.c.status).where(sa.or_(waiting, lost)).order_by(RUN.c.due_at).limit(limit)
        async with self.engine.begin() as conn:
            if conn.dialect.name != "postgresql":
                candidates = [(str(r[0]), str(r[1])) for r in await conn.execute(pick)]
            else:
                rows = await conn.execute(_CLAIM_DUE_PG, {
                    "scheduled": vocab.SCHEDULED, "running": vocab.RUNNING, "worker": worker, "at": at,
                    "until": at + timedelta(seconds=ttl_s), "limit": limit})
                return [(str(r[0]), str(r[1])) for r in rows]
        return [(run_id, status) for run_id, status in candidates
                if await self.claim(run_id, (status,), worker, ttl_s)]
