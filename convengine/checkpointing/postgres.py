"""The official async Postgres saver on a psycopg pool (the only module importing psycopg)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from langgraph.checkpoint.base import BaseCheckpointSaver

from convengine.checkpointing.serde import StrictSerializer
from convengine.db.url import DatabaseUrl


@asynccontextmanager
async def postgres_saver(url: DatabaseUrl, *, pool_size: int = 20) -> AsyncIterator[BaseCheckpointSaver[str]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow, dict_row
    from psycopg_pool import AsyncConnectionPool

    assert url.libpq is not None
    pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
        url.libpq, min_size=1, max_size=pool_size, open=False, check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}, max_lifetime=600)
    await pool.open(wait=True, timeout=30)
    try:
        saver = AsyncPostgresSaver(pool, serde=StrictSerializer())
        await _set_up(pool, saver)
        # The saver guards every call with one lock even on a pool (langgraph #7259); pool
        # connections are independent, so let half the pool work at once. The saver types its
        # lock as an asyncio.Lock; a Semaphore has the same acquire/release interface.
        saver.lock = asyncio.Semaphore(max(pool_size // 2, 1))  # type: ignore[assignment]
        yield saver
    finally:
        await pool.close()


SETUP_LOCK_KEY = 7405918204


class _Cursor(Protocol):
    async def fetchone(self) -> Mapping[str, Any] | None: ...


class _Connection(Protocol):
    async def execute(self, query: str) -> _Cursor: ...


class _Pool(Protocol):
    """A psycopg pool whose rows are dicts (psycopg itself loads only with a PostgreSQL saver)."""

    def connection(self) -> AbstractAsyncContextManager[_Connection]: ...


class _Migrating(Protocol):
    """A LangGraph saver or store on PostgreSQL: ``setup()`` runs its migrations."""

    async def setup(self) -> None: ...


async def _set_up(pool: _Pool, saver: _Migrating) -> None:
    """The saver's own migrations, one process at a time (concurrent setups collide on its version table).

    The lock is polled with ``pg_try_advisory_lock`` rather than waited for: the setup builds
    indexes CONCURRENTLY, which waits for every open transaction, including a session blocked
    in ``pg_advisory_lock``, so a blocking wait would deadlock undetected.
    """
    async with pool.connection() as conn:
        query = f"SELECT pg_try_advisory_lock({SETUP_LOCK_KEY}) AS locked"  # the pool's rows are dicts
        while not await _locked(conn, query):
            await asyncio.sleep(0.05)
        try:
            await saver.setup()
        finally:
            await conn.execute(f"SELECT pg_advisory_unlock({SETUP_LOCK_KEY})")


async def _locked(conn: _Connection, query: str) -> bool:
    row = await (await conn.execute(query)).fetchone()
    return row is not None and bool(row["locked"])
