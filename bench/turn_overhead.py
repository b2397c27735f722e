"""Turn overhead: the engine's turn time on the example flows, against a bare LangGraph graph.

For each saver (SQLite, PostgreSQL) this prints the engine's median and p99 turn time and the
ratio to a bare graph with the same number of nodes on the same saver in durability="exit",
and to the raw floor of one read and one write of the conversation row. The three are timed
in alternating blocks of turns, so drift on a shared machine affects them alike.

    python bench/turn_overhead.py [--turns 300]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FLOWS,
    Flow,
    bare_graph,
    fresh_database,
    run_and_report,
    saver_for,
    time_interleaved,
)
from convengine.engine import Engine

TITLE = "Turn overhead (durability=exit, same saver; target <= 1.5x the bare graph)"
HEADER = ["saver", "flow", "engine p50 ms", "engine p99 ms", "bare p50 ms", "engine/bare", "floor p50 ms",
          "engine/floor"]


@asynccontextmanager
async def engine_turns(url: str, flow: Flow) -> AsyncIterator[tuple[Callable[[int], Awaitable[Any]], int]]:
    engine = await Engine.aopen(url, **flow.options())
    cid = str(uuid.uuid4())

    async def turn(i: int) -> None:
        nonlocal cid
        if flow.reset_every and i and i % flow.reset_every == 0:
            cid = str(uuid.uuid4())
        await engine.aprocess(flow.messages[i % len(flow.messages)], cid)

    try:
        yield turn, len(engine.graph.get_graph().nodes) - 2  # without __start__ / __end__
    finally:
        await engine.aclose()


@asynccontextmanager
async def bare_turns(url: str, nodes: int) -> AsyncIterator[Callable[[int], Awaitable[Any]]]:
    async with saver_for(url) as saver:
        graph = bare_graph(nodes).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}

        async def turn(i: int) -> None:
            await graph.ainvoke({"text": f"message {i}"}, config, durability="exit")

        yield turn


@asynccontextmanager
async def floor_turns(url: str) -> AsyncIterator[Callable[[int], Awaitable[Any]]]:
    """One read and one write of the conversation row: the least any persistent turn must do."""
    import sqlalchemy as sa

    from convengine.db import create_async_sa_engine, parse_database_url, upgrade
    from convengine.db.models import CeConversation

    parsed = parse_database_url(url)
    await asyncio.to_thread(upgrade, parsed)
    engine = create_async_sa_engine(parsed)
    table = CeConversation.__table__
    cid = str(uuid.uuid4())
    async with engine.begin() as conn:
        await conn.execute(sa.insert(table).values(conversation_id=cid, context_json={}, input_params_json={}))

    async def turn(i: int) -> None:
        async with engine.begin() as conn:
            await conn.execute(sa.select(table).where(table.c.conversation_id == cid))
            await conn.execute(sa.update(table).where(table.c.conversation_id == cid).values(last_user_text=str(i)))

    try:
        yield turn
    finally:
        await engine.dispose()


async def measure_flow(backend: str, flow: Flow, turns: int, pg_url: str | None, folder: Path) -> dict[str, Any]:
    """Engine, bare graph and floor timed in alternating blocks (each on its own fresh database)."""
    async with AsyncExitStack() as stack:
        engine, nodes = await stack.enter_async_context(engine_turns(fresh_database(backend, pg_url, folder), flow))
        bare = await stack.enter_async_context(bare_turns(fresh_database(backend, pg_url, folder), nodes))
        floor = await stack.enter_async_context(floor_turns(fresh_database(backend, pg_url, folder)))
        timings = await time_interleaved({"engine": engine, "bare": bare, "floor": floor}, turns, warmup=30)
    e, b, f = timings["engine"], timings["bare"], timings["floor"]
    return {"backend": backend, "flow": flow.name, "nodes": nodes, "turns": turns,
            "engine_median_ms": e.median_ms, "engine_p99_ms": e.p99_ms, "bare_median_ms": b.median_ms,
            "bare_p99_ms": b.p99_ms, "ratio_to_bare": e.median_ms / b.median_ms, "floor_median_ms": f.median_ms,
            "ratio_to_floor": e.median_ms / f.median_ms}


async def measure(turns: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    results = [await measure_flow(backend, flow, turns, pg_url, folder)
               for backend in ["sqlite"] + (["postgres"] if pg_url else []) for flow in FLOWS]
    rows = [[r["backend"], r["flow"], f"{r['engine_median_ms']:.2f}", f"{r['engine_p99_ms']:.2f}",
             f"{r['bare_median_ms']:.2f}", f"{r['ratio_to_bare']:.2f}x", f"{r['floor_median_ms']:.2f}",
             f"{r['ratio_to_floor']:.1f}x"] for r in results]
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    run_and_report("turn_overhead", TITLE, HEADER, lambda folder, pg_url: measure(args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
