"""Checkpoint pruning that keeps what undo and redo need.

With undo on, a conversation keeps its head, the chain of earlier states undo can go back to
(``conversation_memory.undo_depth`` of them) and the undone heads redo can re-apply; every other
checkpoint is deleted, with its writes and, on PostgreSQL, the blobs no kept checkpoint uses.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from convengine.checkpointing.timeline import kept_checkpoints


async def prune_keeping_undo(saver: BaseCheckpointSaver[str], thread_id: str, depth: int) -> int:
    """Delete the checkpoints of ``thread_id`` that undo/redo can no longer reach; how many were kept.

    Runs on the shared saver's own connection (SQLite) or pool (PostgreSQL), never on the engine's
    turn pool: the turn that prunes still holds its connection of that pool."""
    kept = await kept_checkpoints(saver, thread_id, depth)
    if not kept:
        return 0
    if isinstance(saver, AsyncSqliteSaver):
        await _prune_sqlite(saver, thread_id, sorted(kept))
    else:
        await _prune_postgres(saver, thread_id, sorted(kept))
    return len(kept)


async def _prune_sqlite(saver: Any, thread_id: str, kept: list[str]) -> None:
    marks = ", ".join("?" for _ in kept)
    async with saver.lock:
        for table in ("writes", "checkpoints"):
            await saver.conn.execute(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' "
                                     f"AND checkpoint_id NOT IN ({marks})", (thread_id, *kept))
        await saver.conn.commit()


async def _prune_postgres(saver: Any, thread_id: str, kept: list[str]) -> None:
    """On a connection of the saver's psycopg pool (rows are dicts), in one transaction."""
    from langgraph.checkpoint.postgres.base import PRUNE_CHECKPOINTS_SQL, PRUNE_REFERENCED_BLOBS_SQL

    async with saver.conn.connection() as conn, conn.transaction():
        await conn.execute("DELETE FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = '' "
                           "AND checkpoint_id <> ALL(%s)", (thread_id, kept))
        freed = await (await conn.execute(PRUNE_CHECKPOINTS_SQL, (thread_id, "", kept))).fetchall()
        referenced = {(r["channel"], r["version"])
                      for r in await (await conn.execute(PRUNE_REFERENCED_BLOBS_SQL, (thread_id, ""))).fetchall()}
        garbage: dict[str, list[str]] = {}
        for row in freed:
            if (row["channel"], row["version"]) not in referenced:
                garbage.setdefault(row["channel"], []).append(row["version"])
        for channel, versions in garbage.items():
            await conn.execute("DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = '' "
                               "AND channel = %s AND version = ANY(%s)", (thread_id, channel, versions))
