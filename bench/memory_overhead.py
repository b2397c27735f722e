"""Memory overhead: turn time with long-term properties enabled against the same engine without them.

Two engines run the same pack and messages on fresh databases of the same backend: one without
``conversation_memory.long_term`` and without a user, one with a long-term property and a
``user_id`` on every turn (the property is loaded when each conversation starts, read at every
commit and saved when it changes, every fifth turn here). They are timed in alternating blocks,
so drift on a shared machine hits both alike. Target: enabled within 1.10x of disabled.

    python bench/memory_overhead.py [--turns 300]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import fresh_database, run_and_report, time_interleaved
from convengine.engine import Engine

TITLE = "Memory overhead (long-term properties on vs off; target <= 1.10x)"
HEADER = ["saver", "off p50 ms", "off p99 ms", "on p50 ms", "on p99 ms", "on/off"]
MESSAGES = ("hello", "I need a loan", "a loan in french", "purple elephants", "hello again")
NEW_CONVERSATION_EVERY = 25


def pack(long_term: bool) -> dict[str, Any]:
    memory = {"long_term": ["language", "tier"]} if long_term else {}
    return {
        "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}, "conversation_memory": memory},
        "ce_intent": [{"intent_code": "GREETING", "description": "hello"},
                      {"intent_code": "LOAN", "description": "loans"}],
        "ce_intent_classifier": [
            {"intent_code": "GREETING", "state_code": "IDLE", "rule_type": "REGEX", "pattern": r"^\s*(hi|hello)\b",
             "priority": 1},
            {"intent_code": "LOAN", "state_code": "START", "rule_type": "CONTAINS", "pattern": "loan", "priority": 2}],
        "ce_rule": [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START",
                     "rule_type": "REGEX", "match_pattern": "(?i)french", "action": "SET_TASK",
                     "action_value": "prefs:switch", "priority": 1}],
        "ce_response": [{"intent_code": "GREETING", "state_code": "IDLE", "exact_text": "Hello"},
                        {"intent_code": "LOAN", "state_code": "START", "exact_text": "Loan started"},
                        {"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Sorry?"}],
    }


def switch(task: Any) -> None:
    """Changes the long-term property on every "french" turn (so it is saved, not only read)."""
    task.context["language"] = "fr" if task.context.get("language") != "fr" else "en"


@asynccontextmanager
async def turns(url: str, long_term: bool) -> AsyncIterator[Callable[[int], Awaitable[Any]]]:
    engine = await Engine.aopen(url, pack=pack(long_term), tasks={"prefs": {"switch": switch}})
    cid = str(uuid.uuid4())

    async def turn(i: int) -> None:
        nonlocal cid
        if i and i % NEW_CONVERSATION_EVERY == 0:
            cid = str(uuid.uuid4())
        await engine.aprocess(MESSAGES[i % len(MESSAGES)], cid, user_id="bench-user" if long_term else None)

    try:
        yield turn
    finally:
        await engine.aclose()


async def measure(turn_count: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    results = []
    for backend in ["sqlite"] + (["postgres"] if pg_url else []):
        async with AsyncExitStack() as stack:
            off = await stack.enter_async_context(turns(fresh_database(backend, pg_url, folder), False))
            on = await stack.enter_async_context(turns(fresh_database(backend, pg_url, folder), True))
            timings = await time_interleaved({"off": off, "on": on}, turn_count, warmup=30)
        o, n = timings["off"], timings["on"]
        results.append({"backend": backend, "turns": turn_count, "off_median_ms": o.median_ms, "off_p99_ms": o.p99_ms,
                        "on_median_ms": n.median_ms, "on_p99_ms": n.p99_ms, "ratio": n.median_ms / o.median_ms})
    rows = [[r["backend"], f"{r['off_median_ms']:.2f}", f"{r['off_p99_ms']:.2f}", f"{r['on_median_ms']:.2f}",
             f"{r['on_p99_ms']:.2f}", f"{r['ratio']:.2f}x"] for r in results]
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    run_and_report("memory_overhead", TITLE, HEADER, lambda folder, pg_url: measure(args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
