"""Serving: the HTTP path against the Python API, 1 vs 2 workers, several servers on one database,
and start-up times. PostgreSQL only (the production saver).

- **HTTP vs Python API**: the support desk at each concurrency, every worker its own conversation,
  through ``await engine.aprocess`` in this process and over HTTP to ``convengine serve`` in its own
  process (the load generator is this process). Besides turns/s and latency (which, on a machine whose
  cores the load generator and PostgreSQL share, measure the machine as much as the engine) it reports
  the serving process's CPU time per turn, which contention does not inflate. Targets: HTTP within 1.2x
  of the Python API; p99 at 64 concurrent conversations within 3x its p50. The load generator holds
  one keep-alive connection per conversation and sends pre-encoded requests (:mod:`bench.http_client`:
  a general client's own CPU, on the same cores, would be charged to the HTTP path).
- **Workers**: ``convengine serve --workers 1`` and ``--workers 2`` on the same load.
- **Several servers**: N separate ``convengine serve`` processes (as N hosts behind a load balancer)
  on one database, the conversations spread over them; per-server and total turns/s.
- **Start-up**: ``import convengine``, ``convengine --help``, ``Engine.open`` (pack imported on a fresh
  database, and again on a database that already holds it) and ``convengine serve`` until ``/health``.

    python bench/serving.py [--seconds 4] [--levels 1,4,16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, SUPPORT_DESK, fresh_database, run_and_report
from bench.http_client import KeepAlive, post_bytes
from bench.throughput import MESSAGE_PATH, Level, drive, message
from convengine.engine import Engine

TITLE = "Serving on PostgreSQL (support desk; CPU ms/turn = the serving process's CPU time per turn)"
HEADER = ["measure", "setup", "concurrency", "turns/s", "p50 ms", "p99 ms", "CPU ms/turn", "vs python", "target"]
CLOCK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its live descendants (Linux /proc)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLOCK
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class Servers:
    """``count`` ``convengine serve`` processes (each with ``workers`` workers) on one database."""

    def __init__(self, url: str, folder: Path, *, count: int = 1, workers: int = 1) -> None:
        self.started = time.perf_counter()
        self.ports, self.processes, self.logs = [], [], []
        for i in range(count):
            port = _free_port()
            log = (folder / f"server-{uuid.uuid4().hex[:6]}-{i}.log").open("w")
            command = [sys.executable, "-m", "convengine.cli", "serve", "--url", url, "--pack", str(SUPPORT_DESK.pack),
                       "--port", str(port), "--llm", "none", "--log-level", "warning", "--workers", str(workers)]
            self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
            self.ports.append(port)
            self.logs.append(log)

    @property
    def bases(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    async def ready(self, workers: int = 1, url: str | None = None) -> float:
        """Seconds from start until every server answers /health (and, with workers, all have started)."""
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient() as client:
            for base in self.bases:
                while True:
                    try:
                        if (await client.get(base + "/health")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                        raise RuntimeError("a server did not start (see its log in the bench folder)")
                    await asyncio.sleep(0.05)
        if url is not None and workers > 1:
            await asyncio.to_thread(_wait_listeners, url, workers * len(self.processes))
        return time.perf_counter() - self.started

    def cpu_s(self) -> float:
        return sum(tree_cpu_s(p.pid) for p in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process, log in zip(self.processes, self.logs, strict=True):
            process.wait(timeout=30)
            log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listeners(url: str, count: int) -> None:
    import sqlalchemy as sa

    db = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            with db.connect() as conn:
                if conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND query ILIKE 'LISTEN%'")).scalar_one() >= count:
                    return
            time.sleep(0.2)
    finally:
        db.dispose()


@dataclass
class Run:
    level: Level
    cpu_ms: float
    per_server: list[int]
    peak_connections: int = 0


def database_connections(url: str) -> int:
    """Connections to this database now (every server process's pools and stream connections)."""
    import sqlalchemy as sa

    db = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=sa.NullPool)
    try:
        with db.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) - 1 FROM pg_stat_activity "
                                            "WHERE datname = current_database()")).scalar_one())
    finally:
        db.dispose()


async def peak_connections(url: str, stop: asyncio.Event) -> int:
    peak = 0
    while not stop.is_set():
        peak = max(peak, await asyncio.to_thread(database_connections, url))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=0.5)
    return peak


async def python_run(engine: Engine, concurrency: int, seconds: float) -> Run:
    cids = [str(uuid.uuid4()) for _ in range(concurrency)]
    began = time.process_time()
    level = await drive(lambda w, i: engine.aprocess(message(i), cids[w]), concurrency, seconds)
    return Run(level, (time.process_time() - began) * 1000 / max(level.turns, 1), [level.turns])


async def http_run(servers: Servers, concurrency: int, seconds: float) -> Run:
    """Conversation w goes to server w mod N (a load balancer with sticky-free round robin), each worker on
    its own keep-alive connection (:mod:`bench.http_client`)."""
    cids = [str(uuid.uuid4()) for _ in range(concurrency)]
    ports = servers.ports
    counts = [0] * len(ports)
    requests = [[post_bytes("127.0.0.1", ports[w % len(ports)], MESSAGE_PATH, {"message": text, "conversationId": cid})
                 for text in SUPPORT_DESK.messages] for w, cid in enumerate(cids)]
    connections = [KeepAlive("127.0.0.1", ports[w % len(ports)]) for w in range(concurrency)]

    async def turn(w: int, i: int) -> None:
        await connections[w].send(requests[w][i % len(SUPPORT_DESK.messages)])
        counts[w % len(ports)] += 1

    try:
        began = servers.cpu_s()
        level = await drive(turn, concurrency, seconds)
        return Run(level, (servers.cpu_s() - began) * 1000 / max(level.turns, 1), counts)
    finally:
        for connection in connections:
            await connection.close()


def row(measure: str, setup: str, run: Run, python: Run | None, target: str) -> list[Any]:
    level = run.level
    ratio = "" if python is None else f"{run.cpu_ms / python.cpu_ms:.2f}x cpu, " \
        f"{python.level.per_second / level.per_second:.2f}x time"
    return [measure, setup, level.concurrency, f"{level.per_second:.1f}", f"{level.percentile(0.5):.1f}",
            f"{level.percentile(0.99):.1f}", f"{run.cpu_ms:.1f}", ratio, target]


def result(measure: str, setup: str, run: Run) -> dict[str, Any]:
    level = run.level
    return {"measure": measure, "setup": setup, "concurrency": level.concurrency, "turns": level.turns,
            "turns_per_second": level.per_second, "p50_ms": level.percentile(0.5),
            "p99_ms": level.percentile(0.99), "cpu_ms_per_turn": run.cpu_ms, "per_server_turns": run.per_server,
            "peak_connections": run.peak_connections,
            "mean_ms": statistics.fmean(level.latencies) * 1000 if level.latencies else None}


async def http_vs_python(pg_url: str, folder: Path, levels: list[int], seconds: float,
                         rows: list[list[Any]], results: list[dict[str, Any]]) -> None:
    engine = await Engine.aopen(fresh_database("postgres", pg_url, folder), **SUPPORT_DESK.options())
    url = fresh_database("postgres", pg_url, folder)
    servers = Servers(url, folder)
    try:
        await servers.ready()
        for n in levels:
            python = await python_run(engine, n, seconds)
            http = await http_run(servers, n, seconds)
            target = "<= 1.2x" + ("; p99 <= 3x p50" if n == 64 else "")
            rows += [row("http vs python", "python API", python, None, ""),
                     row("http vs python", "http, 1 worker", http, python, target)]
            results += [result("http vs python", "python", python), result("http vs python", "http", http)]
    finally:
        servers.stop()
        await engine.aclose()


async def scale_out(pg_url: str, folder: Path, concurrency: int, seconds: float,
                    rows: list[list[Any]], results: list[dict[str, Any]]) -> None:
    for count, workers, measure in ((1, 1, "workers"), (1, 2, "workers"), (2, 1, "servers"), (3, 1, "servers")):
        url = fresh_database("postgres", pg_url, folder)
        servers = Servers(url, folder, count=count, workers=workers)
        try:
            await servers.ready(workers, url)
            stop = asyncio.Event()
            sampler = asyncio.create_task(peak_connections(url, stop))
            run = await http_run(servers, concurrency, seconds)
            stop.set()
            run.peak_connections = await sampler
        finally:
            servers.stop()
        setup = f"--workers {workers}" if measure == "workers" else \
            f"{count} servers (turns each: {', '.join(str(c) for c in run.per_server)})"
        setup += f"; peak {run.peak_connections} DB connections"
        rows.append(row(measure, setup, run, None, ""))
        results.append(result(measure, setup, run))


def _timed(command: list[str], repeat: int = 5) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


async def startup(pg_url: str, folder: Path) -> list[tuple[str, float]]:
    times = [("python -c 'import convengine'", _timed([sys.executable, "-c", "import convengine"])),
             ("convengine --help", _timed([sys.executable, "-m", "convengine.cli", "--help"])),
             ("python -c 'pass' (the interpreter alone)", _timed([sys.executable, "-c", "pass"]))]
    for backend in ("sqlite", "postgres"):
        url = fresh_database(backend, pg_url, folder)
        for label in ("fresh database", "pack already imported"):
            began = time.perf_counter()
            engine = await Engine.aopen(url, **SUPPORT_DESK.options())
            times.append((f"Engine.open on {backend}, {label}", time.perf_counter() - began))
            await engine.aclose()
    url = fresh_database("postgres", pg_url, folder)
    for workers in (1, 2):
        servers = Servers(url, folder, workers=workers)
        try:
            times.append((f"convengine serve --workers {workers} until /health (postgres)",
                          await servers.ready(workers, url)))
        finally:
            servers.stop()
    return times


async def measure(levels: list[int], seconds: float, pg_url: str | None,
                  folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    if not pg_url:
        print("serving: PostgreSQL unavailable, nothing measured")
        return [], []
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    await http_vs_python(pg_url, folder, levels, seconds, rows, results)
    await scale_out(pg_url, folder, max(levels), seconds, rows, results)
    for label, seconds_taken in await startup(pg_url, folder):
        target = "< 0.3 s" if label.startswith(("python -c 'import", "convengine --help")) else ""
        rows.append(["start-up", label, "", "", "", "", "", f"{seconds_taken:.2f} s", target])
        results.append({"measure": "start-up", "setup": label, "seconds": seconds_taken})
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--levels", default="1,4,16,64")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    run_and_report("serving", TITLE, HEADER, lambda folder, pg_url: measure(levels, args.seconds, pg_url, folder))


if __name__ == "__main__":
    main()
