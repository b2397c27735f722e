"""The engine's checkpointer: one saver, which a PostgreSQL turn binds to its own transaction.

A turn on PostgreSQL holds the conversation's advisory lock in an open transaction and
writes its projection, history and audit rows there. While the turn runs, :class:`TurnSaver`
sends the checkpoint reads and writes to an ``AsyncPostgresSaver`` on that same connection,
so the checkpoint commits with the turn's rows or rolls back with them: a server lost
between the two can no longer leave one without the other. Outside a turn (reads of state,
Studio-style calls, SQLite) every call goes to the shared saver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from sqlalchemy.ext.asyncio import AsyncConnection

_BOUND: ContextVar[BaseCheckpointSaver[str] | None] = ContextVar("convengine_turn_saver", default=None)


class TurnSaver(BaseCheckpointSaver[str]):
    """Delegates to the saver bound to the current turn, else to the shared one."""

    def __init__(self, shared: BaseCheckpointSaver[str]) -> None:
        super().__init__(serde=shared.serde)
        self.shared = shared

    @asynccontextmanager
    async def bind(self, conn: AsyncConnection | None) -> AsyncIterator[None]:
        """Route this task's checkpoint calls through ``conn``'s transaction (PostgreSQL only)."""
        if conn is None or conn.dialect.name != "postgresql":
            yield
            return
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        raw = await conn.get_raw_connection()
        token = _BOUND.set(AsyncPostgresSaver(raw.driver_connection, serde=self.shared.serde))  # type: ignore[arg-type]
        try:
            yield
        finally:
            _BOUND.reset(token)

    @property
    def target(self) -> BaseCheckpointSaver[str]:
        return _BOUND.get() or self.shared

    @property
    def config_specs(self) -> list[Any]:
        return self.shared.config_specs

    def get_next_version(self, current: str | None, channel: None) -> str:
        return self.shared.get_next_version(current, channel)

    # --- async (what turns use) --------------------------------------------------------

    async def aget_tuple(self, config: Any) -> Any:
        return await self.target.aget_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for item in self.target.alist(config, **kwargs):
            yield item

    async def aput(self, config: Any, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> Any:
        return await self.target.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self.target.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.target.adelete_thread(thread_id)

    async def aget_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Mapping[str, Any]:
        return await self.target.aget_delta_channel_history(config=config, channels=channels)

    # --- sync (the shared saver; turns never run synchronously) ------------------------

    def get_tuple(self, config: Any) -> Any:
        return self.shared.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return self.shared.list(config, **kwargs)

    def put(self, config: Any, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> Any:
        return self.shared.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.shared.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.shared.delete_thread(thread_id)
