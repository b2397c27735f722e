"""Throughput: turns per second and p50/p99 latency with 1, 4, 16 and 64 concurrent conversations.

PostgreSQL only (the production saver). Each level runs for a fixed time, every worker driving
its own conversation of the support-desk pack, in three ways:

- ``python``: one Engine in this process, ``await engine.aprocess(...)``;
- ``http``: ``convengine serve`` in its own process, driven from this (separate) process over HTTP;
- ``bare``: the bare LangGraph graph of the same node count on the same saver, the floor.

    python bench/throughput.py [--seconds 5] [--levels 1,4,16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SUPPORT_DESK, bare_graph, fresh_database, run_and_report, saver_for
from convengine.engine import Engine

TITLE = "Throughput on PostgreSQL (support desk; each worker its own conversation)"
HEADER = ["mode", "concurrency", "turns/s", "p50 ms", "p99 ms", "turns", "vs bare turns/s"]
NODES = 27
Turn = Callable[[int, int], Awaitable[Any]]  # (worker, turn index) -> awaitable


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


async def python_levels(url: str, levels: list[int], seconds: float) -> list[Level]:
    engine = await Engine.aopen(url, **SUPPORT_DESK.options())
    try:
        results = []
        for n in levels:
            cids = [str(uuid.uuid4()) for _ in range(n)]
            results.append(await drive(lambda w, i, c=cids: engine.aprocess(message(i), c[w]), n, seconds))
        return results
    finally:
        await engine.aclose()


async def bare_levels(url: str, levels: list[int], seconds: float) -> list[Level]:
    async with saver_for(url) as saver:
        graph = bare_graph(NODES).compile(checkpointer=saver)
        results = []
        for n in levels:
            configs = [{"configurable": {"thread_id": str(uuid.uuid4())}} for _ in range(n)]
            results.append(await drive(lambda w, i, c=configs: graph.ainvoke({"text": message(i)}, c[w],
                                                                              durability="exit"), n, seconds))
        return results


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


async def http_levels(url: str, levels: list[int], seconds: float, folder: Path) -> list[Level]:
    server = ServerProcess(url, folder / "server.log")
    try:
        await server.ready()
        results = []
        for n in levels:
            cids = [str(uuid.uuid4()) for _ in range(n)]
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits) as client:

                async def turn(w: int, i: int, c: list[str] = cids, http: httpx.AsyncClient = client) -> None:
                    reply = await http.post("/api/v1/conversation/message",
                                            json={"message": message(i), "conversationId": c[w]})
                    if reply.status_code != 200 or not reply.json().get("success"):
                        raise RuntimeError(f"turn failed: {reply.text[:200]}")

                results.append(await drive(turn, n, seconds))
        return results
    finally:
        server.stop()


async def measure(levels: list[int], seconds: float, pg_url: str | None,
                  folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    if not pg_url:
        print("throughput: PostgreSQL unavailable, nothing measured")
        return [], []
    bare = await bare_levels(fresh_database("postgres", pg_url, folder), levels, seconds)
    modes = {"python": await python_levels(fresh_database("postgres", pg_url, folder), levels, seconds),
             "http": await http_levels(fresh_database("postgres", pg_url, folder), levels, seconds, folder),
             "bare": bare}
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for mode, measured in modes.items():
        for level, floor in zip(measured, bare, strict=True):
            ratio = level.per_second / floor.per_second
            rows.append([mode, level.concurrency, f"{level.per_second:.1f}", f"{level.percentile(0.5):.1f}",
                         f"{level.percentile(0.99):.1f}", level.turns, f"{ratio:.2f}x"])
            results.append({"mode": mode, "concurrency": level.concurrency, "turns_per_second": level.per_second,
                            "p50_ms": level.percentile(0.5), "p99_ms": level.percentile(0.99), "turns": level.turns,
                            "seconds": level.seconds, "ratio_to_bare": ratio,
                            "mean_ms": statistics.fmean(level.latencies) * 1000})
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--levels", default="1,4,16,64")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    run_and_report("throughput", TITLE, HEADER, lambda folder, pg_url: measure(levels, args.seconds, pg_url, folder))


if __name__ == "__main__":
    main()
