"""The engine's checkpointer: one saver, which a turn binds to its own transaction.

A turn holds its conversation's lock (PostgreSQL: an advisory lock in an open transaction;
SQLite: a file lock) and a connection, on which it writes its projection, history and audit
rows at the end. While the turn runs, :class:`TurnSaver` sends the checkpoint reads and writes
to the official saver of that backend bound to the same connection, so the checkpoint commits
with the turn's rows or rolls back with them: a server lost between the two can no longer leave
one without the other. On SQLite the saver's own commits are deferred
(:class:`DeferredCommit`): its checkpoint write opens the turn's write transaction, the rows
follow on the same connection and one commit ends it, so SQLite's write lock is held only for
the turn's final writes, not while it runs. Outside a turn (reads of state, Studio-style calls)
every call goes to the shared saver. Every checkpoint read is checked (:func:`~convengine.checkpointing.timeline.checked`):
its metadata is stored bytes, so a wrong type or an out-of-range value is refused, not used.

A turn that tells :meth:`TurnSaver.bind` the latest checkpoint id it read under its lock starts
from this process's copy of that checkpoint when it has one (:mod:`convengine.checkpointing.recent`),
and its own checkpoint is kept once the turn has committed.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.catalog.errors import UnsafeCheckpointError
from convengine.checkpointing.recent import Kept, RecentCheckpoints, keep, rebuild
from convengine.checkpointing.sqlite import prune_sqlite
from convengine.checkpointing.timeline import checked

PRUNE_IN_TURN = ("PostgreSQL checkpoints cannot be pruned with keep_latest inside a turn: that prune runs in a "
                 "REPEATABLE READ transaction of its own, which must set its isolation level before any query; "
                 "prune once the turn has committed")
_BOUND: ContextVar[BaseCheckpointSaver[str] | None] = ContextVar("convengine_turn_saver", default=None)


@dataclass(slots=True)
class Latest:
    """A turn's view of its conversation's latest checkpoint, read under the turn's lock."""

    thread_id: str
    checkpoint_id: str | None
    """The latest checkpoint's id (None: none, or writes are pending on it: read the database)."""
    written: Kept | None = None
    """The checkpoint this turn wrote (kept once the turn has committed)."""
    absent: bool = False
    """The conversation had no checkpoint at all (so a read of its latest one answers None unread)."""


_LATEST: ContextVar[Latest | None] = ContextVar("convengine_turn_latest", default=None)


class DeferredCommit:
    """An aiosqlite connection whose ``commit()`` waits for the turn's own commit.

    The official SQLite saver commits after every write; during a turn that would end the turn's
    transaction before its rows are written. Everything else goes to the connection unchanged.
    """

    def __init__(self, conn: object) -> None:
        self._conn = conn

    async def commit(self) -> None:
        """Deferred: the turn commits once, after its rows (see ``commit_turn_connection``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def driver_connection(conn: AsyncConnection) -> Any:
    """The DBAPI driver's connection (aiosqlite or psycopg) under ``conn``."""
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None, "a checked-out connection has its driver connection"
    return raw


async def commit_turn_connection(conn: AsyncConnection) -> None:
    """Commit a turn's connection: SQLAlchemy's transaction and, on SQLite, whatever the bound
    saver wrote through :class:`DeferredCommit` (it may have written before SQLAlchemy began)."""
    await conn.commit()
    if conn.dialect.name == "sqlite":
        await (await driver_connection(conn)).commit()


VERSION_DIGITS = 12
"""Width of a channel version's counter (the official savers pad it to 32 digits)."""
VERSION_RANDOM_BITS = 40


def next_version(current: str | int | None) -> str:
    """The version after ``current``: its counter plus one, zero-padded to :data:`VERSION_DIGITS`,
    then a random suffix, as the official savers write it but half as long (a checkpoint carries
    one version per channel and per node that saw it: on SQLite they were a third of its bytes).

    The random suffix keeps two branches apart (a turn after an undo counts from the same number as
    the undone one; on PostgreSQL a blob is keyed by its version). Versions stay ordered across the
    change: while the counter is below 10**20, a 12-digit counter has a non-zero digit where a
    32-digit one still has zeros, so every new version compares above every older one, as LangGraph
    needs (it takes the greatest version of a checkpoint and compares each channel's to the one
    each node last saw).
    """
    number = 0 if current is None else current if isinstance(current, int) else int(current.split(".", 1)[0])
    return f"{number + 1:0{VERSION_DIGITS}d}.{random.getrandbits(VERSION_RANDOM_BITS):0{VERSION_RANDOM_BITS // 4}x}"


class TurnSaver(BaseCheckpointSaver[str]):
    """Delegates to the saver bound to the current turn, else to the shared one."""

    def __init__(self, shared: BaseCheckpointSaver[str], recent: RecentCheckpoints | None = None) -> None:
        super().__init__(serde=shared.serde)
        self.shared = shared
        self.recent = recent or RecentCheckpoints()

    @asynccontextmanager
    async def bind(self, conn: AsyncConnection | None, latest: Latest | None = None) -> AsyncIterator[None]:
        """Route this task's checkpoint calls through ``conn``'s transaction. ``latest``: the
        conversation's latest checkpoint as the turn read it under its lock; the block commits the
        turn (its checkpoint is kept when the block ends without an exception)."""
        if conn is None:
            yield
            return
        token = _BOUND.set(await self._saver_on(conn))
        latest_token = _LATEST.set(latest)
        try:
            yield
        except BaseException:
            if latest is not None:
                self.recent.forget(latest.thread_id)
            raise
        else:
            if latest is not None and latest.written is not None:
                self.recent.put(latest.thread_id, latest.written)
        finally:
            _LATEST.reset(latest_token)
            _BOUND.reset(token)

    def forget(self, thread_id: str) -> None:
        """Drop the kept checkpoint of ``thread_id`` (its checkpoints are being changed in place)."""
        self.recent.forget(thread_id)

    async def _saver_on(self, conn: AsyncConnection) -> BaseCheckpointSaver[str]:
        raw = await driver_connection(conn)
        if conn.dialect.name == "postgresql":
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            return AsyncPostgresSaver(raw, serde=self.shared.serde)

        # DeferredCommit stands in for the aiosqlite.Connection it wraps (every other attribute is passed on)
        saver = AsyncSqliteSaver(DeferredCommit(raw), serde=self.shared.serde)  # type: ignore[arg-type]
        saver.is_setup = True  # the shared saver created the tables
        return saver

    @property
    def target(self) -> BaseCheckpointSaver[str]:
        return _BOUND.get() or self.shared

    @property
    def config_specs(self) -> list[Any]:
        return self.shared.config_specs

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current)

    # --- async (what turns use) --------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        latest = self._latest_for(config)
        if latest is not None and latest.absent:
            return None  # the turn's lock holder read that the conversation has no checkpoint
        kept = self._kept_for(config)
        if kept is not None:
            return checked(rebuild(config["configurable"]["thread_id"], kept, self.serde))
        try:
            found = await self.target.aget_tuple(config)
        except (ValueError, RecursionError) as exc:  # metadata that is not JSON, or nested too deep
            raise UnsafeCheckpointError(f"a stored checkpoint cannot be read ({type(exc).__name__}); it was not "
                                        "used (the checkpoint was altered outside the engine)") from None
        return None if found is None else checked(found)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        async for item in self.target.alist(config, filter=filter, before=before, limit=limit):
            yield checked(item)

    def _latest_for(self, config: RunnableConfig) -> Latest | None:
        """The bound turn's view of its conversation, when ``config`` asks for that conversation's latest
        checkpoint (no id, the root namespace)."""
        latest = _LATEST.get()
        conf = config["configurable"]
        if (latest is None or _BOUND.get() is None or conf.get("checkpoint_id") or conf.get("checkpoint_ns", "")
                or conf.get("thread_id") != latest.thread_id):
            return None
        return latest

    def _kept_for(self, config: RunnableConfig) -> Kept | None:
        """This process's copy of the checkpoint ``config`` asks for, when the bound turn read under its
        lock that it is still the conversation's latest (and nothing is pending on it)."""
        latest = self._latest_for(config)
        if latest is None or latest.checkpoint_id is None:
            return None
        return self.recent.get(latest.thread_id, latest.checkpoint_id)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        thread_id = config["configurable"]["thread_id"]
        latest = _LATEST.get() if _BOUND.get() is not None else None
        if (latest is not None and thread_id == latest.thread_id
                and not config["configurable"].get("checkpoint_ns", "")):
            latest.written = keep(config, checkpoint, metadata, self.serde)
            latest.absent = False
        else:
            self.recent.forget(thread_id)
        return await self.target.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self._not_kept(config["configurable"]["thread_id"])
        await self.target.aput_writes(config, writes, task_id, task_path)

    def _not_kept(self, thread_id: str) -> None:
        """Writes pending on a checkpoint: neither the kept copy nor this turn's is what a read returns."""
        self.recent.forget(thread_id)
        latest = _LATEST.get()
        if latest is not None and latest.thread_id == thread_id:
            latest.written = None
            latest.checkpoint_id = None
            latest.absent = False

    async def adelete_thread(self, thread_id: str) -> None:
        self._not_kept(thread_id)
        await self.target.adelete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """The PostgreSQL saver's own prune; the SQLite saver has none, :func:`prune_sqlite` stands in.

        Raises:
            NotImplementedError: ``keep_latest`` of some thread on PostgreSQL inside a turn: that prune
                needs a transaction of its own (``SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`` must
                come before any query), which a turn's open transaction cannot give it. ``delete`` runs
                in the turn (in a savepoint). The engine prunes after the turn has committed.
        """
        for thread_id in [thread_ids] if isinstance(thread_ids, str) else thread_ids:
            self._not_kept(thread_id)
        target = self.target
        if isinstance(target, AsyncSqliteSaver):
            await prune_sqlite(target, thread_ids, strategy)
            return
        if _BOUND.get() is not None and strategy == "keep_latest" and thread_ids and not isinstance(thread_ids, str):
            raise NotImplementedError(PRUNE_IN_TURN)
        await target.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        return await self.target.aget_delta_channel_history(config=config, channels=channels)

    # --- sync (the shared saver; turns never run synchronously) ------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = self.shared.get_tuple(config)
        return None if found is None else checked(found)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        return (checked(item) for item in self.shared.list(config, filter=filter, before=before, limit=limit))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        self.recent.forget(config["configurable"]["thread_id"])
        return self.shared.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.recent.forget(config["configurable"]["thread_id"])
        self.shared.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.recent.forget(thread_id)
        self.shared.delete_thread(thread_id)
