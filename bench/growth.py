"""Growth: per-turn time and bytes written per turn from turn 1 to 1,000 of one conversation.

Nothing a turn reads or writes may grow with the conversation: the checkpoint carries a
bounded window of recent turns, and the full history lives in ce_conversation_history. For
each saver this prints, per window of turns, the engine's median turn time, the bare graph's
(same node count, same saver, durability="exit"), their ratio, and the bytes each wrote per
turn (checkpoint tables, plus the engine's history and audit rows), and the checkpoint bytes
still stored at the end of each window (the engine prunes older checkpoints every
``checkpoint_prune_every`` turns; the bare graph keeps them all).

    python bench/growth.py [--turns 1000] [--window 100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SUPPORT_DESK, bare_graph, fresh_database, run_and_report, saver_for
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine

TITLE = "Growth over one conversation (support desk; per window of turns)"
HEADER = ["saver", "turns", "engine p50 ms", "bare p50 ms", "engine/bare", "engine B written/turn",
          "bare B written/turn", "engine checkpoint B kept", "bare checkpoint B kept"]
CHECKPOINT_TABLES = {"postgresql": ("checkpoints", "checkpoint_blobs", "checkpoint_writes"),
                     "sqlite": ("checkpoints", "writes")}
ENGINE_TABLES = ("ce_audit", "ce_audit_turn", "ce_conversation_history")


class ByteMeter:
    """Bytes of the rows one conversation owns: checkpoint tables, optionally its ce_* rows."""

    def __init__(self, url: str, conversation_id: str, *, engine_rows: bool) -> None:
        self.db = create_sync_engine(parse_database_url(url))
        self.cid = conversation_id
        self.checkpoint_tables = [(t, "thread_id") for t in CHECKPOINT_TABLES[self.db.dialect.name]]
        self.engine_tables = [(t, "conversation_id") for t in ENGINE_TABLES] if engine_rows else []

    def checkpoints(self) -> int:
        return self._sum(self.checkpoint_tables)

    def engine_rows(self) -> int:
        """The append-only ce_* rows (read once a window: scanning them every turn would disturb the timing)."""
        return self._sum(self.engine_tables)

    def _sum(self, tables: list[tuple[str, str]]) -> int:
        with self.db.connect() as conn:
            return sum(_table_bytes(conn, table, key, self.cid) for table, key in tables)

    def close(self) -> None:
        self.db.dispose()


def _table_bytes(conn: sa.Connection, table: str, key: str, conversation_id: str) -> int:
    if conn.dialect.name == "postgresql":
        query = f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {table} t WHERE {key} = :id"
    else:
        columns = [c["name"] for c in sa.inspect(conn).get_columns(table)]
        total = " + ".join(f"COALESCE(length(CAST({c} AS BLOB)), 0)" for c in columns)
        query = f"SELECT COALESCE(SUM({total}), 0) FROM {table} WHERE {key} = :id"
    return int(conn.execute(sa.text(query), {"id": conversation_id}).scalar_one())


@dataclass
class Window:
    median_ms: float
    bytes_written: float
    """Median bytes a turn added (turns that pruned older checkpoints left out)."""
    checkpoint_bytes_kept: int
    """Checkpoint bytes stored for the conversation at the end of the window."""


async def run_windows(turn: Any, meter: ByteMeter, turns: int, window: int,
                      prune_every: int) -> AsyncIterator[Window]:
    """One Window per ``window`` turns, yielded as each completes."""
    rows_before = await asyncio.to_thread(meter.engine_rows)
    before = await asyncio.to_thread(meter.checkpoints)
    for start in range(0, turns, window):
        samples, written = [], []
        for i in range(start, min(start + window, turns)):
            began = time.perf_counter()
            await turn(i)
            samples.append(time.perf_counter() - began)
            after = await asyncio.to_thread(meter.checkpoints)
            if not prune_every or (i + 1) % prune_every:  # a pruning turn deletes more than it writes
                written.append(after - before)
            before = after
        rows_after = await asyncio.to_thread(meter.engine_rows)
        per_turn_rows = (rows_after - rows_before) / len(samples)
        rows_before = rows_after
        yield Window(statistics.median(samples) * 1000, statistics.median(written) + per_turn_rows, before)


@asynccontextmanager
async def engine_subject(url: str, turns: int, window: int) -> AsyncIterator[tuple[AsyncIterator[Window], int]]:
    engine = await Engine.aopen(url, **SUPPORT_DESK.options())
    cid = str(uuid.uuid4())
    meter = ByteMeter(url, cid, engine_rows=True)

    async def turn(i: int) -> None:
        await engine.aprocess(SUPPORT_DESK.messages[i % len(SUPPORT_DESK.messages)], cid)

    try:
        nodes = len(engine.graph.get_graph().nodes) - 2
        yield run_windows(turn, meter, turns, window, engine.settings.checkpoint_prune_every), nodes
    finally:
        meter.close()
        await engine.aclose()


@asynccontextmanager
async def bare_subject(url: str, nodes: int, turns: int, window: int) -> AsyncIterator[AsyncIterator[Window]]:
    async with saver_for(url) as saver:
        graph = bare_graph(nodes).compile(checkpointer=saver)
        cid = str(uuid.uuid4())
        config = {"configurable": {"thread_id": cid}}
        meter = ByteMeter(url, cid, engine_rows=False)

        async def turn(i: int) -> None:
            await graph.ainvoke({"text": f"message {i}"}, config, durability="exit")

        try:
            yield run_windows(turn, meter, turns, window, 0)
        finally:
            meter.close()


async def both_windows(backend: str, turns: int, window: int, pg_url: str | None,
                       folder: Path) -> list[tuple[Window, Window]]:
    """Engine and bare graph window by window in turn, so drift on a shared machine hits both alike."""
    async with AsyncExitStack() as stack:
        engine, nodes = await stack.enter_async_context(
            engine_subject(fresh_database(backend, pg_url, folder), turns, window))
        bare = await stack.enter_async_context(bare_subject(fresh_database(backend, pg_url, folder), nodes, turns,
                                                            window))
        return [(e, await anext(bare)) async for e in engine]


async def measure(turns: int, window: int, pg_url: str | None,
                  folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        pairs = await both_windows(backend, turns, window, pg_url, folder)
        for index, (e, b) in enumerate(pairs):
            first, last = index * window + 1, min((index + 1) * window, turns)
            rows.append([backend, f"{first}-{last}", f"{e.median_ms:.2f}", f"{b.median_ms:.2f}",
                         f"{e.median_ms / b.median_ms:.2f}x", f"{e.bytes_written:,.0f}", f"{b.bytes_written:,.0f}",
                         f"{e.checkpoint_bytes_kept:,}", f"{b.checkpoint_bytes_kept:,}"])
            results.append({"backend": backend, "first_turn": first, "last_turn": last,
                            "engine_median_ms": e.median_ms, "bare_median_ms": b.median_ms,
                            "ratio_to_bare": e.median_ms / b.median_ms, "engine_bytes_per_turn": e.bytes_written,
                            "bare_bytes_per_turn": b.bytes_written,
                            "engine_checkpoint_bytes_kept": e.checkpoint_bytes_kept,
                            "bare_checkpoint_bytes_kept": b.checkpoint_bytes_kept})
        first_w, last_w = pairs[0][0], pairs[-1][0]
        print(f"{backend}: last window / first window turn time = {last_w.median_ms / first_w.median_ms:.2f}x; "
              f"bytes written per turn {first_w.bytes_written:,.0f} -> {last_w.bytes_written:,.0f}")
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()
    run_and_report("growth", TITLE, HEADER, lambda folder, pg_url: measure(args.turns, args.window, pg_url, folder))


if __name__ == "__main__":
    main()
