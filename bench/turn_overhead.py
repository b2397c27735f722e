"""Turn overhead: the engine's turn time on the example flows, against a bare LangGraph graph.

For each saver (SQLite, PostgreSQL) this prints the engine's median and p99 turn time and the
ratio to a bare graph with the same number of nodes on the same saver in durability="exit",
and to the raw floor of one read and one write of the conversation row.

    python bench/turn_overhead.py [--turns 300]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    FLOWS,
    Flow,
    Timing,
    bare_graph,
    fresh_database,
    postgres_server,
    print_table,
    saver_for,
    time_calls,
    write_results,
)
from convengine.engine import Engine

TITLE = "Turn overhead (durability=exit, same saver; target <= 1.5x the bare graph)"
HEADER = ["saver", "flow", "engine p50 ms", "engine p99 ms", "bare p50 ms", "engine/bare", "floor p50 ms",
          "engine/floor"]


async def engine_timing(url: str, flow: Flow, turns: int) -> tuple[Timing, int]:
    engine = await Engine.aopen(url, **flow.options())
    try:
        cid = str(uuid.uuid4())

        async def turn(i: int) -> None:
            nonlocal cid
            if flow.reset_every and i and i % flow.reset_every == 0:
                cid = str(uuid.uuid4())
            await engine.aprocess(flow.messages[i % len(flow.messages)], cid)

        timing = await time_calls(turn, turns, warmup=30)
        nodes = len(engine.graph.get_graph().nodes) - 2  # without __start__ / __end__
    finally:
        await engine.aclose()
    return timing, nodes


async def bare_timing(url: str, nodes: int, turns: int) -> Timing:
    async with saver_for(url) as saver:
        graph = bare_graph(nodes).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}

        async def turn(i: int) -> None:
            await graph.ainvoke({"text": f"message {i}"}, config, durability="exit")

        return await time_calls(turn, turns, warmup=30)


async def floor_timing(url: str, turns: int) -> Timing:
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
        return await time_calls(turn, turns, warmup=30)
    finally:
        await engine.dispose()


async def measure(turns: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        floor = await floor_timing(fresh_database(backend, pg_url, folder), turns)
        for flow in FLOWS:
            engine, nodes = await engine_timing(fresh_database(backend, pg_url, folder), flow, turns)
            bare = await bare_timing(fresh_database(backend, pg_url, folder), nodes, turns)
            ratio = engine.median_ms / bare.median_ms
            rows.append([backend, flow.name, f"{engine.median_ms:.2f}", f"{engine.p99_ms:.2f}",
                         f"{bare.median_ms:.2f}", f"{ratio:.2f}x", f"{floor.median_ms:.2f}",
                         f"{engine.median_ms / floor.median_ms:.1f}x"])
            results.append({"backend": backend, "flow": flow.name, "nodes": nodes, "turns": turns,
                            "engine_median_ms": engine.median_ms, "engine_p99_ms": engine.p99_ms,
                            "bare_median_ms": bare.median_ms, "bare_p99_ms": bare.p99_ms, "ratio_to_bare": ratio,
                            "floor_median_ms": floor.median_ms, "ratio_to_floor": engine.median_ms / floor.median_ms})
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as pg_url:
        rows, results = asyncio.run(measure(args.turns, pg_url, Path(tmp)))
    print_table(TITLE, HEADER, rows)
    print(f"\nwrote {write_results('turn_overhead', {'turn_overhead': results})}")


if __name__ == "__main__":
    main()
