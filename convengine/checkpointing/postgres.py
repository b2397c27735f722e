"""The official async Postgres saver on a psycopg pool (the only module importing psycopg)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.base import BaseCheckpointSaver

from convengine.checkpointing.serde import StrictSerializer
from convengine.db.url import DatabaseUrl


@asynccontextmanager
async def postgres_saver(url: DatabaseUrl, *, pool_size: int = 20) -> AsyncIterator[BaseCheckpointSaver[str]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    assert url.libpq is not None
    pool: AsyncConnectionPool = AsyncConnectionPool(
        url.libpq, min_size=1, max_size=pool_size, open=False, check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}, max_lifetime=600)
    await pool.open(wait=True, timeout=30)
    try:
        saver = AsyncPostgresSaver(pool, serde=StrictSerializer())  # type: ignore[arg-type]
        await saver.setup()
        # The saver guards every call with one lock even on a pool (langgraph #7259); pool
        # connections are independent, so let half the pool work at once.
        saver.lock = asyncio.Semaphore(max(pool_size // 2, 1))  # type: ignore[assignment]
        yield saver
    finally:
        await pool.close()
