"""Turn overhead: the engine's turn time on the example flows, against LangGraph baselines.

For each saver (SQLite, PostgreSQL) and flow this prints the engine's median and p99 turn time
and its ratio to:

- the fair baseline (:mod:`bench.fair_baseline`): as many trivial nodes as the engine executes
  per turn (counted from its STEP_ENTER audit), an engine-sized state, the engine's own turn
  lock and checkpoint binding, one history row and one commit;
- the bare graph: every compiled node of the engine's graph, a state of one or two tiny fields,
  on the same saver in durability="exit", no lock, no transaction of its own, no row;
- the raw floor of one read and one write of the conversation row.

All four are timed in alternating blocks of turns, so drift on a shared machine affects them
alike. The JSON result carries every ratio, the executed nodes per turn and the load average.

    python bench/turn_overhead.py [--turns 300] [--warmup 30] [--sqlite-only] [--results DIR]
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
    RESULTS,
    Flow,
    bare_graph,
    fresh_database,
    run_and_report,
    saver_for,
    time_interleaved,
)
from bench.fair_baseline import fair_turns, profile
from convengine.engine import Engine

TITLE = "Turn overhead (durability=exit, same saver; targets: <= 1.3x the fair baseline, <= 1.0x the bare graph)"
HEADER = ["saver", "flow", "nodes run/turn", "engine p50 ms", "engine p99 ms", "fair p50 ms", "engine/fair",
          "bare p50 ms", "engine/bare", "floor p50 ms", "engine/floor"]


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


async def measure_flow(backend: str, flow: Flow, turns: int, pg_url: str | None, folder: Path,
                       warmup: int = 30) -> dict[str, Any]:
    """The flow profiled on a probe run, then engine, fair baseline, bare graph and floor timed in
    alternating blocks (each on its own fresh database)."""
    prof = await profile(fresh_database(backend, pg_url, folder), flow)
    async with AsyncExitStack() as stack:
        engine, nodes = await stack.enter_async_context(engine_turns(fresh_database(backend, pg_url, folder), flow))
        fair = await stack.enter_async_context(fair_turns(fresh_database(backend, pg_url, folder), flow, prof))
        bare = await stack.enter_async_context(bare_turns(fresh_database(backend, pg_url, folder), nodes))
        floor = await stack.enter_async_context(floor_turns(fresh_database(backend, pg_url, folder)))
        timings = await time_interleaved({"engine": engine, "fair": fair, "bare": bare, "floor": floor}, turns,
                                         warmup=warmup)
    e = timings["engine"]
    result: dict[str, Any] = {"backend": backend, "flow": flow.name, "nodes": nodes, **prof.describe(),
                              "turns": turns, "warmup": warmup,
                              "engine_median_ms": e.median_ms, "engine_p99_ms": e.p99_ms}
    for name in ("fair", "bare", "floor"):
        t = timings[name]
        result |= {f"{name}_median_ms": t.median_ms, f"{name}_p99_ms": t.p99_ms,
                   f"ratio_to_{name}": e.median_ms / t.median_ms}
    return result


def row(r: dict[str, Any]) -> list[Any]:
    return [r["backend"], r["flow"], f"{r['executed_nodes_per_turn']:.2f} of {r['nodes']}",
            f"{r['engine_median_ms']:.2f}", f"{r['engine_p99_ms']:.2f}", f"{r['fair_median_ms']:.2f}",
            f"{r['ratio_to_fair']:.2f}x", f"{r['bare_median_ms']:.2f}", f"{r['ratio_to_bare']:.2f}x",
            f"{r['floor_median_ms']:.2f}", f"{r['ratio_to_floor']:.1f}x"]


async def measure(turns: int, pg_url: str | None, folder: Path,
                  warmup: int = 30) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    results = [await measure_flow(backend, flow, turns, pg_url, folder, warmup)
               for backend in ["sqlite"] + (["postgres"] if pg_url else []) for flow in FLOWS]
    return [row(r) for r in results], results


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30, help="untimed turns of each variant first")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON result")
    args = parser.parse_args(argv)
    return run_and_report("turn_overhead", TITLE, HEADER,
                          lambda folder, pg_url: measure(args.turns, pg_url, folder, args.warmup),
                          postgres=not args.sqlite_only, results=args.results)


if __name__ == "__main__":
    main()
