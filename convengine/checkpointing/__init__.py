"""Checkpointers (the official SQLite and Postgres savers) and per-conversation turn locks."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import sqlalchemy as sa
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from convengine._internal.filelocks import FileLockTimeout, exclusive
from convengine.catalog.errors import ConversationBusyError, PersistenceError
from convengine.checkpointing.bound import driver_connection
from convengine.checkpointing.hops import Prepared, fetch_one
from convengine.checkpointing.postgres import postgres_saver
from convengine.checkpointing.serde import StrictSerializer
from convengine.checkpointing.sqlite import prune_sqlite
from convengine.db.url import DatabaseUrl

logger = logging.getLogger(__name__)
SQLITE_LOCK_BUCKETS = 4096


@asynccontextmanager
async def open_saver(url: DatabaseUrl, *, pool_size: int = 20) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """The official saver for the URL's backend, set up (its own tables), closed on exit."""
    if url.backend == "sqlite":
        async with _sqlite_saver(url) as saver:
            yield saver
    else:
        async with postgres_saver(url, pool_size=pool_size) as saver:
            yield saver


@asynccontextmanager
async def _sqlite_saver(url: DatabaseUrl) -> AsyncIterator[BaseCheckpointSaver[str]]:

    assert url.sqlite_path is not None
    conn = await aiosqlite.connect(str(url.sqlite_path), timeout=30)
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute("PRAGMA busy_timeout=30000")
        saver = AsyncSqliteSaver(conn, serde=StrictSerializer())
        await saver.setup()
        yield saver
    finally:
        await conn.close()


async def discard_checkpoint(saver: BaseCheckpointSaver[str], config: RunnableConfig) -> bool:
    """Delete one checkpoint and its writes (the SQLite saver); False when the saver is another kind."""
    if not isinstance(saver, AsyncSqliteSaver):
        return False
    conf = config["configurable"]
    key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
    async with saver.lock:
        for table in ("writes", "checkpoints"):
            await saver.conn.execute(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ? "
                                     "AND checkpoint_id = ?", key)
        await saver.conn.commit()
    return True


async def prune_checkpoints(saver: BaseCheckpointSaver[str], thread_id: str) -> None:
    """Keep only a conversation's latest checkpoint (the official savers' ``keep_latest``; the
    SQLite saver has none, :func:`~convengine.checkpointing.sqlite.prune_sqlite` stands in)."""
    if isinstance(saver, AsyncSqliteSaver):
        await prune_sqlite(saver, [thread_id])
    else:
        await saver.aprune([thread_id], strategy="keep_latest")


@dataclass
class FirstRead:
    """A statement a turn reads first, once it holds its conversation, in its transaction (the engine's
    admission). On PostgreSQL it is sent with the lock, in one round trip: PostgreSQL runs the statements
    of a pipeline in order, each READ COMMITTED statement with a snapshot of its own, so the read sees
    every turn committed before the lock was granted. ``row`` is its first row once the lock is held."""

    prepared: Prepared
    values: dict[str, Any]
    row: tuple[Any, ...] | None = None


@dataclass
class TurnLocks:
    """Serialises the turns of one conversation; different conversations run in parallel.

    In-process an ``asyncio.Lock`` per conversation; across processes a PostgreSQL
    transaction-level advisory lock (held until the turn's rows are committed) or, for SQLite,
    a file lock next to the database file.
    """

    url: DatabaseUrl
    engine: AsyncEngine
    timeout_s: float
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _waiters: dict[str, int] = field(default_factory=dict)
    _folder: Path | None = None

    def held(self) -> int:
        """How many conversations have a turn running or waiting in this process."""
        return len(self._locks)

    def lock_folder(self) -> Path:
        """The folder of this database's SQLite turn-lock files (made on first use; the engine makes it
        when it opens, off the event loop)."""
        if self._folder is None:
            self._folder = _lock_folder_for(self.url)
        return self._folder

    @asynccontextmanager
    async def hold(self, conversation_id: str,
                   working: Callable[[], AbstractAsyncContextManager[None]] | None = None,
                   first: FirstRead | None = None) -> AsyncIterator[AsyncConnection | None]:
        """Hold the conversation for a turn.

        Yields the connection the turn's checkpoint and rows are written on, committed once at
        the end of the turn. On PostgreSQL its transaction holds the lock, and committing
        releases it; on SQLite the lock is a file lock held until the turn ends. ``working`` (a work
        slot, see :mod:`convengine._internal.working`) is entered once this process's other turns of the
        conversation are done and before the database's lock and connection are taken: a turn waiting
        for a slot holds no connection, and a turn waiting behind its own conversation holds no slot.
        ``first`` (see :class:`FirstRead`) is read once the conversation is held, before this yields.
        """
        async with self._local(conversation_id), (working or contextlib.nullcontext)():
            if self.url.is_postgres:
                async with self._postgres(conversation_id, first) as conn:
                    yield conn
            else:
                async with self._sqlite(conversation_id), self._connection() as conn:
                    if first is not None:
                        first.row = await fetch_one(conn, first.prepared, first.values)
                    yield conn

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """A SQLite turn's connection; whatever it did not commit is rolled back."""
        conn = await self.engine.connect()
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                raw = await driver_connection(conn)
                if raw.in_transaction:  # read without a thread hop; a committed turn has nothing to undo
                    await raw.rollback()
            await _discard(conn)

    @asynccontextmanager
    async def _local(self, conversation_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(conversation_id, asyncio.Lock())
        self._waiters[conversation_id] = self._waiters.get(conversation_id, 0) + 1
        try:
            async with asyncio.timeout(self.timeout_s or None):  # no task per acquire, as wait_for makes
                await lock.acquire()
        except TimeoutError:
            raise _busy(conversation_id, self.timeout_s) from None
        finally:
            self._waiters[conversation_id] -= 1
        try:
            yield
        finally:
            lock.release()
            if not self._waiters.get(conversation_id):
                self._waiters.pop(conversation_id, None)
                self._locks.pop(conversation_id, None)

    @asynccontextmanager
    async def _postgres(self, conversation_id: str, first: FirstRead | None) -> AsyncIterator[AsyncConnection]:
        conn = await self._locked_connection(conversation_id, first)
        try:
            yield conn
        finally:
            if conn.in_transaction():
                await conn.rollback()
            await conn.close()

    async def _locked_connection(self, conversation_id: str, first: FirstRead | None) -> AsyncConnection:
        """A connection whose open transaction holds the conversation's advisory lock (and has read ``first``).

        A connection dropped by a server restart fails its first statement; it is invalidated (with
        the pool's other connections, which the restart dropped too) and the lock is retried once on a
        fresh connection.
        """
        import psycopg  # PostgreSQL's driver is an optional dependency (the postgres extra)

        for attempt in (1, 2):
            conn = await self.engine.connect()
            try:
                await conn.begin()
                await self._lock(conn, conversation_id, first)
                return conn
            except (sa.exc.DBAPIError, psycopg.Error) as exc:
                dropped = await _dropped(conn, exc)
                if dropped and attempt == 1:
                    continue
                if _lock_timed_out(exc):
                    raise _busy(conversation_id, self.timeout_s) from None
                logger.warning("could not lock conversation %s: %s", conversation_id, _first_line(exc))
                raise PersistenceError(f"could not lock conversation {conversation_id}: the database is unavailable "
                                       "or busy; retry later") from exc
            except BaseException:
                await _discard(conn)
                raise
        raise AssertionError("unreachable")

    async def _lock(self, conn: AsyncConnection, conversation_id: str, first: FirstRead | None) -> None:
        """BEGIN, the lock's timeout, the lock and ``first`` in one round trip (a psycopg pipeline: the
        statements run in order, and the first to fail aborts the rest)."""
        raw = await driver_connection(conn)
        async with raw.pipeline():
            await raw.execute("SELECT set_config('lock_timeout', %s, true)", (str(int(self.timeout_s * 1000)),))
            await raw.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (_lock_key(conversation_id),))
            cursor = None if first is None else await raw.execute(first.prepared.sql,
                                                                  first.prepared.parameters(first.values))
        if first is not None and cursor is not None:  # (cursor is None exactly when first is)
            first.row = await cursor.fetchone()

    @asynccontextmanager
    async def _sqlite(self, conversation_id: str) -> AsyncIterator[None]:
        folder = self.lock_folder()
        bucket = _lock_key(conversation_id) % SQLITE_LOCK_BUCKETS
        try:
            async with exclusive(folder / f"{bucket}.lock", self.timeout_s):
                yield
        except FileLockTimeout:
            raise _busy(conversation_id, self.timeout_s) from None


async def _dropped(conn: AsyncConnection, exc: BaseException) -> bool:
    """Put away a connection whose lock failed; whether the server had dropped it. SQLAlchemy invalidates
    a dropped connection it ran a statement on; one found dropped by the driver's own calls (the lock's
    pipeline) is invalidated here, and the pool's other connections with it (the same restart dropped them)."""
    if isinstance(exc, sa.exc.DBAPIError):
        await _discard(conn)
        return bool(exc.connection_invalidated)
    raw = await driver_connection(conn)
    if raw.broken or raw.closed:
        await conn.invalidate()
        await conn.close()
        await conn.engine.dispose()  # as SQLAlchemy invalidates its pool on a disconnect it sees
        return True
    await _discard(conn)
    return False


def _lock_timed_out(exc: BaseException) -> bool:
    from psycopg.errors import LockNotAvailable  # an optional dependency, PostgreSQL only

    return isinstance(getattr(exc, "orig", exc), LockNotAvailable) or "lock timeout" in str(exc).lower()


async def _discard(conn: AsyncConnection) -> None:
    with contextlib.suppress(Exception):  # the connection may already be dead
        await conn.rollback()
    await conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lock_folder_for(url: DatabaseUrl) -> Path:
    assert url.sqlite_path is not None
    folder = url.sqlite_path.with_name(url.sqlite_path.name + ".locks")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _lock_key(conversation_id: str) -> int:
    """A stable signed 63-bit key for advisory locks."""
    return int.from_bytes(hashlib.sha256(conversation_id.encode()).digest()[:8], "big") >> 1


def _busy(conversation_id: str, timeout_s: float) -> ConversationBusyError:
    return ConversationBusyError(
        f"conversation {conversation_id} is busy: another turn did not finish within {timeout_s:g}s; retry",
        details={"conversationId": conversation_id})


def describe(saver: object) -> str:
    return type(saver).__name__
