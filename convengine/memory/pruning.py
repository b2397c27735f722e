"""Checkpoint pruning that keeps what undo and redo need.

With undo on, a conversation keeps its head, the chain of earlier states undo can go back to
(``conversation_memory.undo_depth`` of them) and the undone heads redo can re-apply; every other
checkpoint is deleted, with its writes and, on PostgreSQL, the blobs no kept checkpoint uses.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from convengine.checkpointing.timeline import Position, kept_checkpoints, link


async def prune_keeping_undo(saver: BaseCheckpointSaver[str], thread_id: str, depth: int) -> int:
    """Delete the checkpoints of ``thread_id`` that undo/redo can no longer reach; how many were kept.

    Runs on the shared saver's own connection (SQLite) or pool (PostgreSQL), never on the engine's
    turn pool: the turn that prunes still holds its connection of that pool."""
    sqlite = isinstance(saver, AsyncSqliteSaver)
    links = await (_links_sqlite(saver, thread_id) if sqlite else _links_postgres(saver, thread_id))
    kept = kept_checkpoints(links, depth)
    if not kept:
        return 0
    if sqlite:
        await _prune_sqlite(saver, thread_id, sorted(kept))
    else:
        await _prune_postgres(saver, thread_id, sorted(kept))
    return len(kept)


_LINKS = ("SELECT checkpoint_id, parent_checkpoint_id, metadata FROM checkpoints "
          "WHERE thread_id = {mark} AND checkpoint_ns = ''")
"""Each of a conversation's checkpoints with what places it on the timeline: one read of ids and
metadata, not one full checkpoint (its state decoded) per step back."""


async def _links_sqlite(saver: Any, thread_id: str) -> dict[str, Position]:
    async with saver.lock, saver.conn.execute(_LINKS.format(mark="?"), (thread_id,)) as cursor:
        rows = await cursor.fetchall()
    return {row[0]: link(row[2], row[1]) for row in rows}


async def _links_postgres(saver: Any, thread_id: str) -> dict[str, Position]:
    from psycopg.rows import tuple_row  # the postgres extra

    async with saver.conn.connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LINKS.format(mark="%(t)s"), {"t": thread_id})
        rows = await cursor.fetchall()
    return {row[0]: link(row[2], row[1]) for row in rows}


async def _prune_sqlite(saver: Any, thread_id: str, kept: list[str]) -> None:
    marks = ", ".join("?" for _ in kept)
    async with saver.lock:
        for table in ("writes", "checkpoints"):
            await saver.conn.execute(f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' "
                                     f"AND checkpoint_id NOT IN ({marks})", (thread_id, *kept))
        await saver.conn.commit()


_PRUNE_PG = (
    # One statement: every sub-statement sees the rows as they were before it, so the blobs still in
    # use are read from the kept checkpoints, not from what is left after the delete.
    "WITH gone_writes AS (DELETE FROM checkpoint_writes WHERE thread_id = %(t)s AND checkpoint_ns = '' "
    "AND checkpoint_id <> ALL(%(kept)s)), "
    "gone AS (DELETE FROM checkpoints WHERE thread_id = %(t)s AND checkpoint_ns = '' "
    "AND checkpoint_id <> ALL(%(kept)s) RETURNING checkpoint -> 'channel_versions' AS versions), "
    "freed AS (SELECT DISTINCT v.key AS channel, v.value AS version FROM gone "
    "CROSS JOIN LATERAL jsonb_each_text(gone.versions) AS v), "
    "used AS (SELECT DISTINCT v.key AS channel, v.value AS version FROM checkpoints c "
    "CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v "
    "WHERE c.thread_id = %(t)s AND c.checkpoint_ns = '' AND c.checkpoint_id = ANY(%(kept)s)) "
    "DELETE FROM checkpoint_blobs b USING (SELECT * FROM freed EXCEPT SELECT * FROM used) AS garbage "
    "WHERE b.thread_id = %(t)s AND b.checkpoint_ns = '' AND b.channel = garbage.channel "
    "AND b.version = garbage.version"
)


async def _prune_postgres(saver: Any, thread_id: str, kept: list[str]) -> None:
    """On a connection of the saver's psycopg pool, in one statement: the other checkpoints, their
    writes and the blobs no kept checkpoint uses."""
    async with saver.conn.connection() as conn:
        await conn.execute(_PRUNE_PG, {"t": thread_id, "kept": kept})
