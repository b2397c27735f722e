"""Shared benchmark plumbing: databases, the bare LangGraph baseline, timing, tables and JSON output."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Flow:
    """An example conversation to measure: its pack, the messages cycled through, how often a new
    conversation starts, and whether it needs the pack's scripted (instant) model."""

    name: str
    pack: Path
    messages: tuple[str, ...]
    reset_every: int | None = None
    scripted: Path | None = None

    def options(self) -> dict[str, Any]:
        """Fresh engine options (tasks, and a new ScriptedLLM when the flow has one)."""
        from convengine.config_loader.companions import pack_options

        return pack_options(self.pack, scripted=self.scripted)


SUPPORT_DESK = Flow("support_desk (deterministic)", EXAMPLES / "support_desk.yaml",
                    ("hello", "I want to cancel my order", "it arrived damaged", "no", "where is my order",
                     "blah blah"))
LOAN = Flow("loan_application (scripted LLM)", EXAMPLES / "loan_application.yaml",
            ("I would like a loan", "my name is Ann Lee", "25k over 3 years", "change the amount to 30000", "yes"),
            reset_every=5, scripted=EXAMPLES / "loan_application_scripted.py")
FLOWS_ASSISTANT = Flow("flows_assistant (conversation flows)", EXAMPLES / "flows_assistant.yaml",
                       ("I want a loan", "hello", "5000", "12"), reset_every=4)
FLOWS = (SUPPORT_DESK, LOAN, FLOWS_ASSISTANT)


LOAD_PER_CPU_LIMIT = 0.25
"""``--update-docs`` refuses to run when the 1-minute load average per CPU is above this before it
starts (see "How figures are measured" in docs/performance.md)."""


def read_load() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages (a seam the tests replace)."""
    return os.getloadavg()


def load_sample() -> dict[str, Any]:
    one, five, fifteen = read_load()
    cpus = os.cpu_count() or 1
    return {"load1": one, "load5": five, "load15": fifteen, "cpus": cpus, "load1_per_cpu": one / cpus}


def loaded(sample: dict[str, Any], limit: float = LOAD_PER_CPU_LIMIT, own_processes: int = 0) -> bool:
    """Whether the machine was busier than ``limit`` per CPU, not counting ``own_processes`` busy
    processes of the benchmark itself (at the end of a run its own work is in the average)."""
    return max(0.0, sample["load1"] - own_processes) / sample["cpus"] > limit


def refuse_if_loaded(sample: dict[str, Any], limit: float, when: str, own_processes: int = 0) -> None:
    """Stop with a clear message when the machine is too busy for figures worth committing."""
    if loaded(sample, limit, own_processes):
        mine = f" after discounting the benchmark's own {own_processes} busy process(es)" if own_processes else ""
        raise SystemExit(
            f"refusing --update-docs: {when} the 1-minute load average was {sample['load1']:.2f} on "
            f"{sample['cpus']} CPU(s){mine}, above the limit of {limit:g} per CPU; figures measured on a "
            "loaded machine are not committed. Run again on a quiet machine (or without --update-docs).")


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine()}


@contextmanager
def postgres_server() -> Iterator[str | None]:
    """CONVENGINE_BENCH_PG_URL (or the test URL) if set, else a throwaway server from scripts/pg-server."""
    given = os.environ.get("CONVENGINE_BENCH_PG_URL") or os.environ.get("CONVENGINE_TEST_PG_URL")
    if given:
        yield given
        return
    folder = tempfile.mkdtemp(prefix="convengine-bench-pg.")
    port = str(_free_port())
    try:
        url = subprocess.run([str(ROOT / "scripts" / "pg-server"), "start", folder, port], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"PostgreSQL unavailable, skipping its rows: {exc}")
        yield None
        return
    try:
        yield url
    finally:
        subprocess.run([str(ROOT / "scripts" / "pg-server"), "stop", folder], check=False)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_database(backend: str, pg_url: str | None, folder: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / f'bench-{uuid.uuid4().hex[:8]}.db'}"
    import sqlalchemy as sa

    assert pg_url is not None
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return pg_url.rsplit("/", 1)[0] + "/" + name


class BareState(TypedDict, total=False):
    text: str
    n: int
    params: dict[str, Any]
    reply: str


def bare_graph(node_count: int) -> StateGraph[Any, Any, Any, Any]:
    """A linear graph of trivial nodes: the floor the engine is compared against."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(BareState)
    names = [f"n{i}" for i in range(node_count)]

    def make(i: int) -> Callable[[BareState], Awaitable[dict[str, Any]]]:
        async def node(state: BareState) -> dict[str, Any]:
            return {"n": state.get("n", 0) + 1}
        return node

    for i, name in enumerate(names):
        graph.add_node(name, make(i))
    return chain(graph, names)


def chain(graph: StateGraph[Any, Any, Any, Any], names: list[str]) -> StateGraph[Any, Any, Any, Any]:
    """``graph`` with its nodes ``names`` run one after the other, from START to END."""
    graph.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph


@asynccontextmanager
async def saver_for(url: str) -> AsyncIterator[Any]:
    from convengine.checkpointing import open_saver
    from convengine.db import parse_database_url

    async with open_saver(parse_database_url(url)) as saver:
        yield saver


@dataclass
class Timing:
    samples: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def time_interleaved(calls: dict[str, Callable[[int], Awaitable[Any]]], count: int, warmup: int,
                           block: int = 20) -> dict[str, Timing]:
    """Time several calls in alternating blocks, so drift on a shared machine hits them all alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        for i in range(warmup):
            await call(i)
    for start in range(0, count, block):
        for name, call in calls.items():
            for i in range(start, min(start + block, count)):
                began = time.perf_counter()
                await call(warmup + i)
                samples[name].append(time.perf_counter() - began)
    return {name: Timing(values) for name, values in samples.items()}


def print_table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(x)) for x in [h, *[r[i] for r in rows]]) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def write_results(name: str, data: dict[str, Any], load_start: dict[str, Any], folder: Path | None = None) -> Path:
    """``<folder>/<name>.json`` with the machine and its load average when the run started and ended."""
    folder = folder or RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    end = load_sample()
    load = {"start": load_start, "end": end, "limit_per_cpu": LOAD_PER_CPU_LIMIT,
            "loaded_at_start": loaded(load_start), "loaded_at_end": loaded(end, own_processes=1)}
    path.write_text(json.dumps({"machine": machine(), "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load": load,
                                **data}, indent=2))
    return path


Measured = tuple[list[list[Any]], list[dict[str, Any]]]


def run_and_report(name: str, title: str, header: list[str],
                   measure: Callable[[Path, str | None], Awaitable[Measured]], *, postgres: bool = True,
                   results: Path | None = None) -> Path:
    """A benchmark's ``main``: measure in a temporary folder (with a PostgreSQL server), print, write JSON
    (into ``results``, by default bench/results/); returns the JSON file's path."""
    load_start = load_sample()
    server: AbstractContextManager[str | None] = postgres_server() if postgres else nullcontext(None)
    with tempfile.TemporaryDirectory() as tmp, server as pg_url:
        rows, measured = asyncio.run(measure(Path(tmp), pg_url))
    print_table(title, header, rows)
    path = write_results(name, {name: measured}, load_start, results)
    print(f"\nwrote {path}")
    return path
