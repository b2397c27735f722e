"""Load: many concurrent conversations over HTTP against a real ``convengine serve``, and what the
database holds checked against what the clients were told.

Each conversation (a new HTTP connection per turn) sends ``--turns`` support-desk messages one after the
other; all conversations start at once. A turn is *answered* (200, ``success``), *failed* (200, an
error reply), *refused* (503 ``SERVER_BUSY`` past the admission queue: the conversation stops there)
or *lost* (no answer within ``--request-timeout-s``). Afterwards the database must hold, for every
conversation, exactly its answered turns, once each and in order, and nothing of a refused or failed
turn; a conversation refused at its first turn must have no row. Reports turns/s, p50/p95/p99 of the
answered turns and, on PostgreSQL, the most connections the servers held. The run is bounded
(``--deadline-s``) and stops its servers (and the PostgreSQL server it started) by itself.

    python bench/load.py [--sqlite 100] [--postgres 1000] [--turns 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SUPPORT_DESK, fresh_database, run_and_report
from bench.serving import Servers, database_connections

TITLE = "Load over HTTP (support desk; every conversation's turns checked against the database)"
HEADER = ["backend", "workers", "conversations", "turns", "answered", "failed", "refused", "lost", "turns/s",
          "p50 ms", "p95 ms", "p99 ms", "peak db conns", "db matches"]
MESSAGE = "/api/v1/conversation/message"


@dataclass
class Conversation:
    cid: str
    answered: list[str] = field(default_factory=list)
    """The messages answered with success, in order."""
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0
    refused: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)


async def converse(client: httpx.AsyncClient, base: str, turns: int, timeout_s: float) -> Conversation:
    conversation = Conversation(str(uuid.uuid4()))
    for turn in range(turns):
        text = SUPPORT_DESK.messages[turn % len(SUPPORT_DESK.messages)]
        started = time.perf_counter()
        try:
            response = await client.post(base + MESSAGE, json={"message": text, "conversationId": conversation.cid},
                                         timeout=timeout_s)
        except httpx.HTTPError as exc:
            conversation.lost += 1
            conversation.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            return conversation
        if response.status_code == 503:
            conversation.refused += 1
            return conversation
        if response.status_code != 200 or not response.json().get("success"):
            conversation.failed += 1
            continue
        conversation.latencies_ms.append((time.perf_counter() - started) * 1000)
        conversation.answered.append(text)
    return conversation


def mismatches(url: str, conversations: list[Conversation]) -> list[str]:
    """Where the database differs from what the clients were told (empty: it holds exactly that)."""
    sync_url = url.replace("postgresql://", "postgresql+psycopg://", 1) if url.startswith("postgresql") else url
    db = sa.create_engine(sync_url, poolclass=sa.NullPool)
    wrong = []
    try:
        with db.connect() as conn:
            history: dict[str, list[str]] = {}
            for cid, text in conn.execute(sa.text("SELECT conversation_id, user_input FROM ce_conversation_history "
                                                  "ORDER BY history_id")):
                history.setdefault(str(cid), []).append(text)
            rows = {str(cid) for (cid,) in conn.execute(sa.text("SELECT conversation_id FROM ce_conversation"))}
    finally:
        db.dispose()
    for conversation in conversations:
        stored = history.get(conversation.cid, [])
        if stored != conversation.answered:
            wrong.append(f"{conversation.cid}: told {conversation.answered}, stored {stored}")
        if not conversation.answered and not conversation.failed and conversation.cid in rows:
            wrong.append(f"{conversation.cid}: refused at its first turn but has a row")
    return wrong


async def peak_connections(url: str, stop: asyncio.Event) -> int:
    peak = 0
    while not stop.is_set():
        peak = max(peak, await asyncio.to_thread(database_connections, url))
        await asyncio.sleep(1)
    return peak


def children(pid: int) -> set[int]:
    """The live descendants of a process (Linux /proc)."""
    found: set[int] = set()
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                kids = [int(c) for c in (task / "children").read_text().split()]
                found.update(kids)
                stack += kids
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


async def watch_processes(servers: Servers, stop: asyncio.Event) -> set[int]:
    """Every process the servers ran during the load (a worker restarted by uvicorn shows as a new one)."""
    seen: set[int] = set()
    while not stop.is_set():
        for process in servers.processes:
            seen |= children(process.pid)
        await asyncio.sleep(0.5)
    return seen


def percentile(values: list[float], share: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[int(share * 100) - 1]


async def run_load(backend: str, url: str, folder: Path, args: argparse.Namespace, count: int,
                   workers: int) -> dict[str, Any]:
    servers = Servers(url, folder, workers=workers)
    try:
        await servers.ready(workers, url if backend == "postgres" else None)
        stop = asyncio.Event()
        sampler = asyncio.create_task(peak_connections(url, stop)) if backend == "postgres" else None
        watcher = asyncio.create_task(watch_processes(servers, stop))
        # A connection per turn: this process, starved of CPU like the servers, can read a response
        # seconds after it was sent, and reusing that connection then races the server's keep-alive
        # timeout (5 s): the request is reset unread (nothing of it runs), which measures the load
        # generator, not the engine.
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
        started = time.perf_counter()
        async with httpx.AsyncClient(limits=limits) as client:
            conversations = await asyncio.wait_for(
                asyncio.gather(*(converse(client, servers.bases[0], args.turns, args.request_timeout_s)
                                 for _ in range(count))), args.deadline_s)
        elapsed = time.perf_counter() - started
        stop.set()
        peak = await sampler if sampler is not None else None
        processes = await watcher
    finally:
        servers.stop()
    problems = [line.strip()[:200] for log in servers.logs for line in Path(log.name).read_text().splitlines()
                if "Traceback" in line or "ERROR" in line or "died" in line][:20]
    latencies = [ms for c in conversations for ms in c.latencies_ms]
    wrong = mismatches(url, conversations)
    return {"backend": backend, "workers": workers, "conversations": count, "turns_per_conversation": args.turns,
            "answered": len(latencies), "failed": sum(c.failed for c in conversations),
            "refused": sum(c.refused for c in conversations), "lost": sum(c.lost for c in conversations),
            "seconds": elapsed, "turns_per_second": len(latencies) / elapsed,
            "p50_ms": percentile(latencies, 0.50), "p95_ms": percentile(latencies, 0.95),
            "p99_ms": percentile(latencies, 0.99), "peak_db_connections": peak,
            "db_matches": not wrong, "mismatches": wrong[:20],
            "lost_because": sorted({e for c in conversations for e in c.errors})[:20],
            "server_processes": len(processes), "server_log_problems": problems, "measured_under_load": True}


def row(result: dict[str, Any]) -> list[Any]:
    return [result["backend"], result["workers"], result["conversations"],
            result["conversations"] * result["turns_per_conversation"], result["answered"], result["failed"],
            result["refused"], result["lost"], f"{result['turns_per_second']:.1f}", f"{result['p50_ms']:.0f}",
            f"{result['p95_ms']:.0f}", f"{result['p99_ms']:.0f}", result["peak_db_connections"] or "-",
            "yes" if result["db_matches"] else "NO"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sqlite", type=int, default=100, help="conversations on SQLite, one worker (0: skip)")
    parser.add_argument("--postgres", type=int, default=1000, help="conversations on PostgreSQL (0: skip)")
    parser.add_argument("--workers", type=int, default=2, help="server workers on PostgreSQL")
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation")
    parser.add_argument("--request-timeout-s", type=float, default=600.0)
    parser.add_argument("--deadline-s", type=float, default=1800.0, help="the whole run of one backend")
    args = parser.parse_args()

    async def measure(folder: Path, pg_url: str | None) -> tuple[list[list[Any]], list[dict[str, Any]]]:
        results = []
        if args.sqlite:
            url = fresh_database("sqlite", None, folder)
            results.append(await run_load("sqlite", url, folder, args, args.sqlite, 1))
        if args.postgres and pg_url is not None:
            url = fresh_database("postgres", pg_url, folder)
            results.append(await run_load("postgres", url, folder, args, args.postgres, args.workers))
        return [row(r) for r in results], results

    run_and_report("load", TITLE, HEADER, measure, postgres=bool(args.postgres))


if __name__ == "__main__":
    main()
