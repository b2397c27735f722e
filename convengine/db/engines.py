"""SQLAlchemy engine factories for the ``ce_*`` tables (sync for tools, async for turns)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from convengine._internal.extras import needs_extra
from convengine.db.url import DatabaseUrl
from convengine.settings import PoolSettings

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A statement's error never carries its parameters (a caller's text, params, a secret) into a message or log.
SAFE_ERRORS = {"hide_parameters": True}


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def create_sync_engine(url: DatabaseUrl, **kwargs: object) -> sa.Engine:
    """A synchronous engine (CLI, migrations, packs, snapshot loading)."""
    kwargs = {**SAFE_ERRORS, **kwargs}
    if url.backend == "sqlite":
        assert url.sqlite_path is not None
        url.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url.sync_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    with needs_extra("postgres", "a PostgreSQL database URL"):
        return sa.create_engine(url.sync_url, pool_pre_ping=True, **kwargs)


@dataclass(frozen=True)
class PoolSize:
    """The turn pool's size: ``size`` connections kept, ``max_overflow`` more under load, ``timeout_s``
    the longest wait for one."""

    size: int
    max_overflow: int
    timeout_s: float = 30.0

    @property
    def capacity(self) -> int:
        return self.size + self.max_overflow


DEFAULT_POOLS = {"postgresql": PoolSize(20, 80), "sqlite": PoolSize(5, 10)}
"""The defaults of ``pool.size`` / ``pool.max_overflow`` per backend (SQLAlchemy's own for SQLite)."""


def pool_size_for(url: DatabaseUrl, settings: PoolSettings) -> PoolSize:
    default = DEFAULT_POOLS["sqlite" if url.backend == "sqlite" else "postgresql"]
    size = default.size if settings.size is None else settings.size
    overflow = default.max_overflow if settings.max_overflow is None else settings.max_overflow
    return PoolSize(size, overflow, settings.timeout_s)


def create_async_sa_engine(url: DatabaseUrl, *, pool: PoolSize | None = None, **kwargs: object) -> AsyncEngine:
    """The async engine turns run on (their lock, checkpoint, projection, history and audit)."""
    kwargs = {**SAFE_ERRORS, **kwargs}
    pool = pool or pool_size_for(url, PoolSettings())
    # LIFO: the most recently used connection serves the next turn, so a few connections stay hot (their
    # prepared statements: psycopg prepares a statement on its fifth run on a connection) and the idle
    # rest can time out, instead of every pooled connection taking turns cold.
    sizing = {"pool_size": pool.size, "max_overflow": pool.max_overflow, "pool_timeout": pool.timeout_s,
              "pool_use_lifo": True}
    if url.backend == "sqlite":
        assert url.sqlite_path is not None
        url.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(
            url.async_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **sizing, **kwargs
        )
        sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    # No pre-ping on the hot path: a turn's first statement (its lock) retries once on a
    # dropped connection instead (see checkpointing.TurnLocks), and SQLAlchemy then
    # invalidates the pool, so a restarted server costs one retry, not a round trip per turn.
    with needs_extra("postgres", "a PostgreSQL database URL"):
        return create_async_engine(url.async_url, **sizing, **kwargs)
