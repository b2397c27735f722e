"""Pruning for the official SQLite saver, which has no ``aprune`` of its own.

The PostgreSQL saver prunes itself (``keep_latest`` or ``delete``); the SQLite saver keeps
checkpoints inline, so the same strategies are plain deletes. They run on the saver's own
connection: a saver bound to a turn (its commit deferred) prunes inside the turn's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

PRUNE_STRATEGIES = ("keep_latest", "delete")
_OLDER = ("checkpoint_id < (SELECT MAX(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = {t}.thread_id "
          "AND c.checkpoint_ns = {t}.checkpoint_ns)")


async def prune_sqlite(saver: AsyncSqliteSaver, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
    """Keep each namespace's latest checkpoint (and its writes) of each thread, or delete the threads.

    Raises:
        TypeError: ``thread_ids`` is one string rather than a sequence of them.
        ValueError: an unknown strategy.
    """
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}: expected one of {', '.join(PRUNE_STRATEGIES)}")
    if not thread_ids:
        return
    async with saver.lock:
        for thread_id in map(str, thread_ids):
            for table in ("writes", "checkpoints"):
                older = "" if strategy == "delete" else " AND " + _OLDER.format(t=table)
                await saver.conn.execute(f"DELETE FROM {table} WHERE thread_id = ?{older}", (thread_id,))
            if strategy == "keep_latest":  # the kept checkpoints' parents are gone
                await saver.conn.execute("UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ?",
                                         (thread_id,))
        await saver.conn.commit()
