"""Versions overhead: a turn when conversations are spread over several configuration versions against
the same turn when every conversation is on one version.

One engine on a fresh database of each backend holds two groups of 16 conversations with the same
pack and messages. In ``one``, every conversation started on version 1. In ``several``, four
versions were published one after another, each while four of the conversations started, so
consecutive turns alternate between conversations pinned to four different versions (each turn
reads its pin and takes its version's compiled snapshot from the engine's cache; nothing is
reloaded per turn). Both groups share the engine and the database, so the only difference is the
versions; they are timed turn by turn, the order swapped every turn, so drift on a shared machine
hits both alike. Target: several within 1.05x of one.
The choice of the version alone (pin read and snapshot cache) is timed the same way.

    python bench/versions_overhead.py [--turns 300]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Timing, fresh_database, run_and_report
from convengine.engine import Engine

TITLE = "Versions overhead (conversations on 4 versions vs 1; target <= 1.05x)"
HEADER = ["saver", "one p50 ms", "one p99 ms", "several p50 ms", "several p99 ms", "several/one",
          "choice one p50 ms", "choice several p50 ms"]
MESSAGES = ("hello", "I need a loan", "hello again", "purple elephants")
VERSIONS = 4
CONVERSATIONS_PER_VERSION = 4


def pack(greeting: str = "Hello") -> dict[str, Any]:
    return {
        "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}},
        "ce_intent": [{"intent_code": "GREETING", "description": "hello"},
                      {"intent_code": "LOAN", "description": "loans"}],
        "ce_intent_classifier": [
            {"intent_code": "GREETING", "state_code": "IDLE", "rule_type": "REGEX", "pattern": r"^\s*(hi|hello)\b",
             "priority": 1},
            {"intent_code": "LOAN", "state_code": "START", "rule_type": "CONTAINS", "pattern": "loan", "priority": 2}],
        "ce_response": [{"intent_code": "GREETING", "state_code": "IDLE", "exact_text": greeting},
                        {"intent_code": "LOAN", "state_code": "START", "exact_text": "Loan started"},
                        {"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Sorry?"}],
    }


@asynccontextmanager
async def turns(url: str) -> AsyncIterator[dict[str, Callable[[int], Awaitable[Any]]]]:
    """One engine, two groups of conversations: ``one`` all started on version 1, ``several`` started four
    per version on versions 1 to 4 (each published in turn); a call runs the next conversation's turn."""
    engine = await Engine.aopen(url, pack=pack())
    groups: dict[str, list[str]] = {"one": [], "several": []}

    async def begin(group: str) -> None:
        groups[group].append(str(uuid.uuid4()))
        await engine.aprocess("hello", groups[group][-1])

    for _ in range(CONVERSATIONS_PER_VERSION * VERSIONS):
        await begin("one")
    for v in range(VERSIONS):
        if v:
            engine.versions.draft(copy.deepcopy(pack(f"Hello from version {v + 1}")), author="bench")
            engine.versions.publish(author="bench")
        for _ in range(CONVERSATIONS_PER_VERSION):
            await begin("several")
    for group, expected in (("one", 1), ("several", VERSIONS)):
        served = {e.payload["version"] for cid in groups[group] for e in await engine.aaudit(cid)
                  if e.stage == "CONFIG_VERSION"}
        assert len(served) == expected, (group, served)

    def caller(conversations: list[str]) -> Callable[[int], Awaitable[Any]]:
        per = CONVERSATIONS_PER_VERSION
        ordered = [conversations[k * per + j] for j in range(per) for k in range(len(conversations) // per)]

        async def turn(i: int) -> None:
            if i < 0:  # only the choice of the version: the pin read and the snapshot cache, nothing else
                await engine._runtime.versions.choose(ordered[-i % len(ordered)], False, None)
                return
            await engine.aprocess(MESSAGES[(i // len(ordered)) % len(MESSAGES)], ordered[i % len(ordered)])

        return turn

    try:
        yield {group: caller(conversations) for group, conversations in groups.items()}
    finally:
        await engine.aclose()


async def measure(turn_count: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    results = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        url = fresh_database(backend, pg_url, folder)
        async with turns(url) as calls:
            timings = await paired(calls, turn_count, warmup=30)
            choices = await paired({name: _negated(call) for name, call in calls.items()}, turn_count, warmup=30)
        if backend == "postgres":
            _drop(pg_url, [url])
        o, s = timings["one"], timings["several"]
        results.append({"backend": backend, "turns": turn_count, "versions": VERSIONS,
                        "one_median_ms": o.median_ms, "one_p99_ms": o.p99_ms,
                        "several_median_ms": s.median_ms, "several_p99_ms": s.p99_ms,
                        "ratio": s.median_ms / o.median_ms,
                        "choose_one_median_ms": choices["one"].median_ms,
                        "choose_several_median_ms": choices["several"].median_ms})
    rows = [[r["backend"], f"{r['one_median_ms']:.2f}", f"{r['one_p99_ms']:.2f}", f"{r['several_median_ms']:.2f}",
             f"{r['several_p99_ms']:.2f}", f"{r['ratio']:.2f}x", f"{r['choose_one_median_ms']:.3f}",
             f"{r['choose_several_median_ms']:.3f}"] for r in results]
    return rows, results


async def paired(calls: dict[str, Callable[[int], Awaitable[Any]]], count: int, warmup: int) -> dict[str, Timing]:
    """Time the calls turn by turn, the order swapped every turn, so neither pays for the other's
    background work (checkpoint flushes, connection returns) more often, and drift hits both alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        for i in range(warmup):
            await call(i)
    names = list(calls)
    for i in range(count):
        for name in names if i % 2 else reversed(names):
            began = time.perf_counter()
            await calls[name](warmup + i)
            samples[name].append(time.perf_counter() - began)
    return {name: Timing(values) for name, values in samples.items()}


def _negated(turn: Callable[[int], Awaitable[Any]]) -> Callable[[int], Awaitable[Any]]:
    async def choose(i: int) -> None:
        await turn(-(i + 1))

    return choose


def _drop(pg_url: str | None, urls: list[str]) -> None:
    """The bench's databases go when it is done (the server may be shared)."""
    import sqlalchemy as sa

    assert pg_url is not None
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for url in urls:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)"))
    admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    run_and_report("versions_overhead", TITLE, HEADER, lambda folder, pg_url: measure(args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
