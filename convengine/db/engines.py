"""SQLAlchemy engine factories for the ``ce_*`` tables (sync for tools, async for turns)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from convengine.db.url import DatabaseUrl

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A statement's error never carries its parameters (a caller's text, params, a secret) into a message or log.
SAFE_ERRORS = {"hide_parameters": True}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def create_sync_engine(url: DatabaseUrl, **kwargs: Any) -> sa.Engine:
    """A synchronous engine (CLI, migrations, packs, snapshot loading)."""
    kwargs = {**SAFE_ERRORS, **kwargs}
    if url.backend == "sqlite":
        assert url.sqlite_path is not None
        url.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url.sync_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url.sync_url, pool_pre_ping=True, **kwargs)


def create_async_sa_engine(url: DatabaseUrl, *, pool_size: int = 10, **kwargs: Any) -> AsyncEngine:
    """The async engine used while turns run (projection, history, audit writes)."""
    kwargs = {**SAFE_ERRORS, **kwargs}
    if url.backend == "sqlite":
        assert url.sqlite_path is not None
        url.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url.async_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs
        )
        sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    # No pre-ping on the hot path: a turn's first statement (its lock) retries once on a
    # dropped connection instead (see checkpointing.TurnLocks), and SQLAlchemy then
    # invalidates the pool, so a restarted server costs one retry, not a round trip per turn.
    return create_async_engine(url.async_url, pool_size=pool_size, max_overflow=pool_size * 4, **kwargs)
