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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
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
from convengine.checkpointing.sqlite import prune_sqlite
from convengine.checkpointing.timeline import checked

PRUNE_IN_TURN = ("PostgreSQL checkpoints cannot be pruned with keep_latest inside a turn: that prune runs in a "
                 "REPEATABLE READ transaction of its own, which must set its isolation level before any query; "
                 "prune once the turn has committed")
_BOUND: ContextVar[BaseCheckpointSaver[str] | None] = ContextVar("convengine_turn_saver", default=None)


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


class TurnSaver(BaseCheckpointSaver[str]):
    """Delegates to the saver bound to the current turn, else to the shared one."""

    def __init__(self, shared: BaseCheckpointSaver[str]) -> None:
        super().__init__(serde=shared.serde)
        self.shared = shared

    @asynccontextmanager
    async def bind(self, conn: AsyncConnection | None) -> AsyncIterator[None]:
        """Route this task's checkpoint calls through ``conn``'s transaction."""
        if conn is None:
            yield
            return
        token = _BOUND.set(await self._saver_on(conn))
        try:
            yield
        finally:
            _BOUND.reset(token)

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
        return self.shared.get_next_version(current, channel)

    # --- async (what turns use) --------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
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

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self.target.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self.target.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.target.adelete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """The PostgreSQL saver's own prune; the SQLite saver has none, :func:`prune_sqlite` stands in.

        Raises:
            NotImplementedError: ``keep_latest`` of some thread on PostgreSQL inside a turn: that prune
                needs a transaction of its own (``SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`` must
                come before any query), which a turn's open transaction cannot give it. ``delete`` runs
                in the turn (in a savepoint). The engine prunes after the turn has committed.
        """
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
        return self.shared.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.shared.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.shared.delete_thread(thread_id)
