"""Throughput: turns per second and p50/p99 latency with 1, 4, 16 and 64 concurrent conversations.

PostgreSQL only (the production saver). Each level runs for a fixed time, every worker driving
its own conversation of the support-desk pack, in three ways:

- ``python``: one Engine in this process, ``await engine.aprocess(...)``, with the default admission
  (``admission.max_turns`` sized from the connection pool, ``admission.max_working_turns`` of them
  doing work at once: 4 per CPU);
- ``python-capped``: the same with ``admission.max_turns`` also at 4 per CPU: the turns past it wait in
  the admission queue instead of the work slots' (a limit that would also cap turns waiting on a model);
- ``http``: ``convengine serve`` in its own process, driven from this (separate) process over HTTP:
  each worker holds one keep-alive connection and sends pre-encoded requests
  (:mod:`bench.http_client`), reading every answer whole and checking it is ``200`` with
  ``"success": true``. A general client (httpx) would charge its own per-request CPU, on the cores the
  server and PostgreSQL share, to the HTTP path, although a real client runs on another machine;
- ``bare``: the bare LangGraph graph of the same node count on the same saver, the floor.

The three are interleaved: each level's time is cut into slices and the modes take turns slice by
slice, so drift on a shared machine affects them alike.

    python bench/throughput.py [--seconds 10] [--levels 1,4,16,64] [--results DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, SUPPORT_DESK, bare_graph, fresh_database, run_and_report, saver_for
from bench.http_client import KeepAlive, post_bytes
from convengine.engine import Engine

TITLE = "Throughput on PostgreSQL (support desk; each worker its own conversation)"
HEADER = ["mode", "concurrency", "turns/s", "p50 ms", "p99 ms", "turns", "vs bare turns/s"]
ROUNDS = 8
CAPPED_TURNS_PER_CPU = 4
"""``python-capped``'s ``admission.max_turns`` per CPU."""
Turn = Callable[[int, int], Awaitable[Any]]  # (worker, turn index) -> awaitable
MESSAGE_PATH = "/api/v1/conversation/message"


@dataclass
class Level:
    concurrency: int
    turns: int
    seconds: float
    latencies: list[float]

    @property
    def per_second(self) -> float:
        return self.turns / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


async def drive(turn: Turn, concurrency: int, seconds: float) -> Level:
    """``concurrency`` workers calling ``turn`` back to back until the time is up."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await turn(w, i)
            latencies.append(time.perf_counter() - began)
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return Level(concurrency, len(latencies), time.perf_counter() - started, latencies)


def message(i: int) -> str:
    return SUPPORT_DESK.messages[i % len(SUPPORT_DESK.messages)]


Mode = Callable[[int], AbstractAsyncContextManager[Turn]]  # concurrency -> its workers' turn, while open


@asynccontextmanager
async def python_mode(url: str, **options: Any) -> AsyncIterator[tuple[Mode, int]]:
    """Turns through one Engine in this process; also yields the engine's compiled node count."""
    engine = await Engine.aopen(url, **SUPPORT_DESK.options(), **options)

    @asynccontextmanager
    async def level(n: int) -> AsyncIterator[Turn]:
        cids = [str(uuid.uuid4()) for _ in range(n)]
        yield lambda w, i: engine.aprocess(message(i), cids[w])

    try:
        yield level, len(engine.graph.get_graph().nodes) - 2  # without __start__ / __end__
    finally:
        await engine.aclose()


@asynccontextmanager
async def bare_mode(url: str, nodes: int) -> AsyncIterator[Mode]:
    async with saver_for(url) as saver:
        graph = bare_graph(nodes).compile(checkpointer=saver)

        @asynccontextmanager
        async def level(n: int) -> AsyncIterator[Turn]:
            configs = [{"configurable": {"thread_id": str(uuid.uuid4())}} for _ in range(n)]
            yield lambda w, i: graph.ainvoke({"text": message(i)}, configs[w], durability="exit")

        yield level


class ServerProcess:
    def __init__(self, url: str, log: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "convengine.cli", "serve", "--url", url, "--pack", str(SUPPORT_DESK.pack),
             "--port", str(self.port), "--llm", "none", "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT)

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                try:
                    if (await client.get(self.base + "/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    await asyncio.sleep(0.2)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@asynccontextmanager
async def http_mode(url: str, folder: Path) -> AsyncIterator[Mode]:
    server = ServerProcess(url, folder / "server.log")
    try:
        await server.ready()

        @asynccontextmanager
        async def level(n: int) -> AsyncIterator[Turn]:
            cids = [str(uuid.uuid4()) for _ in range(n)]
            requests = [[post_bytes("127.0.0.1", server.port, MESSAGE_PATH, {"message": text, "conversationId": cid})
                         for text in SUPPORT_DESK.messages] for cid in cids]
            connections = [KeepAlive("127.0.0.1", server.port) for _ in range(n)]
            try:
                yield lambda w, i: connections[w].send(requests[w][i % len(SUPPORT_DESK.messages)])
            finally:
                for connection in connections:
                    await connection.close()

        yield level
    finally:
        server.stop()


def merged(parts: list[Level]) -> Level:
    """One level from its slices (turns and time added up, latencies pooled)."""
    return Level(parts[0].concurrency, sum(p.turns for p in parts), sum(p.seconds for p in parts),
                 [x for p in parts for x in p.latencies])


async def interleaved(modes: dict[str, Mode], levels: list[int], seconds: float,
                      rounds: int = ROUNDS) -> dict[str, list[Level]]:
    """Each level's time cut into ``rounds`` slices, the modes taking turns slice by slice (the order
    reversed every other round), so drift on a shared machine affects them alike."""
    measured: dict[str, list[Level]] = {mode: [] for mode in modes}
    for n in levels:
        async with AsyncExitStack() as stack:
            turns = {mode: await stack.enter_async_context(level(n)) for mode, level in modes.items()}
            parts: dict[str, list[Level]] = {mode: [] for mode in modes}
            for r in range(rounds):
                for mode in (list(modes) if r % 2 == 0 else list(reversed(modes))):
                    parts[mode].append(await drive(turns[mode], n, seconds / rounds))
        for mode in modes:
            measured[mode].append(merged(parts[mode]))
    return measured


async def measure(levels: list[int], seconds: float, pg_url: str | None,
                  folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    if not pg_url:
        print("throughput: PostgreSQL unavailable, nothing measured")
        return [], []
    async with AsyncExitStack() as stack:
        python, nodes = await stack.enter_async_context(python_mode(fresh_database("postgres", pg_url, folder)))
        capped, _ = await stack.enter_async_context(python_mode(
            fresh_database("postgres", pg_url, folder), admission={"max_turns": CAPPED_TURNS_PER_CPU * (os.cpu_count() or 1)}))
        http = await stack.enter_async_context(http_mode(fresh_database("postgres", pg_url, folder), folder))
        bare = await stack.enter_async_context(bare_mode(fresh_database("postgres", pg_url, folder), nodes))
        modes = await interleaved({"python": python, "python-capped": capped, "http": http, "bare": bare}, levels,
                                  seconds)
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for mode, measured in modes.items():
        for level, floor in zip(measured, modes["bare"], strict=True):
            ratio = level.per_second / floor.per_second
            rows.append([mode, level.concurrency, f"{level.per_second:.1f}", f"{level.percentile(0.5):.1f}",
                         f"{level.percentile(0.99):.1f}", level.turns, f"{ratio:.2f}x"])
            results.append({"mode": mode, "concurrency": level.concurrency, "turns_per_second": level.per_second,
                            "p50_ms": level.percentile(0.5), "p99_ms": level.percentile(0.99), "turns": level.turns,
                            "seconds": level.seconds, "ratio_to_bare": ratio, "bare_nodes": nodes,
                            "mean_ms": statistics.fmean(level.latencies) * 1000})
    return rows, results


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON result")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    return run_and_report("throughput", TITLE, HEADER,
                          lambda folder, pg_url: measure(levels, args.seconds, pg_url, folder), results=args.results)


if __name__ == "__main__":
    main()
