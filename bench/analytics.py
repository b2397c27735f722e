"""Analytics: ``Engine.stats`` over about a million audit events' worth of turns.

Turns are generated here and bulk-inserted (no engine runs them): conversations of one to eight
turns spread over 30 days across a few intents and states, with fallbacks, UNKNOWN turns, handoffs,
ended conversations, feedback, model calls and tokens; each turn also gets a ``ce_audit_turn`` row
holding as many events as a real support-desk turn writes (a recorded turn's packed row, copied),
so the database is the size a real one of that many events would be. Then ``stats`` is timed over
everything and over the last 7 days, in total and per intent, state and day.

    python bench/analytics.py [--events 1000000] [--repeat 5] [--sqlite-only]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SUPPORT_DESK, fresh_database, run_and_report
from convengine.catalog.flows import HANDOFF_STATUS
from convengine.catalog.memory import Lifecycle
from convengine.catalog.vocab import THUMBS_DOWN, THUMBS_UP, UNKNOWN
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.db.models import CeAuditTurn, CeConversation, CeConversationStep, CeMcpUserFeedback
from convengine.engine import Engine

TITLE = "Analytics (Engine.stats over generated turns; each turn's audit row as big as a real turn's)"
HEADER = ["saver", "events", "turns", "conversations", "insert s", "query", "window", "p50 ms", "max ms"]
PLACES = (("GREETING", "IDLE"), ("ORDER", "COLLECT"), ("ORDER", "CONFIRM"), ("ORDER", "DONE"),
          ("SUPPORT", "OPEN"), ("SUPPORT", "HUMAN"), ("FAQ", "ANSWERED"), (UNKNOWN, UNKNOWN))
END_STATE = "DONE"
BATCH = 5000


@dataclass
class Generated:
    """What was inserted: every step, conversation and feedback row (tests tally them themselves)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    conversations: list[dict[str, Any]] = field(default_factory=list)
    feedback: list[dict[str, Any]] = field(default_factory=list)


def _turn(rng: random.Random, cid: str, number: int, at: datetime) -> dict[str, Any]:
    intent, state = rng.choice(PLACES)
    calls = rng.choice((0, 0, 1, 1, 2))
    tokens_in, tokens_out = calls * rng.randint(50, 400), calls * rng.randint(5, 80)
    return {"conversation_id": cid, "turn_key": uuid.uuid4().hex, "turn": number, "input_text": "generated",
            "undone": rng.random() < 0.02, "created_at": at, "intent_code": intent, "state_code": state,
            "fallback": intent == UNKNOWN and rng.random() < 0.8, "handoff": state == "HUMAN",
            "llm_calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out,
            "llm_cost": round(tokens_in * 1e-6 + tokens_out * 4e-6, 9)}


def _conversation(rng: random.Random, steps: list[dict[str, Any]], owner: str) -> dict[str, Any]:
    last = [s for s in steps if not s["undone"]][-1:] or steps[-1:]
    end = last[0]
    handed = any(s["handoff"] and not s["undone"] for s in steps)
    return {"conversation_id": end["conversation_id"], "intent_code": end["intent_code"],
            "state_code": end["state_code"], "status": HANDOFF_STATUS if handed else "RUNNING",
            "lifecycle": Lifecycle.ENDED.value if end["state_code"] == END_STATE else Lifecycle.IN_PROGRESS.value,
            "context_json": {}, "input_params_json": {}, "created_at": steps[0]["created_at"],
            "updated_at": end["created_at"], "owner_id": owner}


def generate(turns: int, *, days: int = 30, seed: int = 7, owners: tuple[str, ...] = ("key:a", "key:b"),
             now: datetime | None = None) -> Generated:
    """About ``turns`` turns in conversations of 1-8 turns, the newest at least an hour before ``now``."""
    rng = random.Random(seed)
    newest = (now or datetime.now(UTC)) - timedelta(hours=1)
    out = Generated()
    while len(out.steps) < turns:
        cid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        start = newest - timedelta(seconds=rng.randint(0, days * 86_400))
        steps = [_turn(rng, cid, n, start + timedelta(seconds=20 * n)) for n in range(1, rng.randint(1, 8) + 1)]
        out.steps.extend(steps)
        out.conversations.append(_conversation(rng, steps, rng.choice(owners)))
        for step in steps:
            if rng.random() < 0.1:
                out.feedback.append({"conversation_id": cid, "feedback_type": rng.choice((THUMBS_UP, THUMBS_DOWN)),
                                     "intent_code": step["intent_code"], "state_code": step["state_code"],
                                     "created_at": step["created_at"]})
    return out


def insert(url: str, data: Generated, audit_row: bytes | None = None) -> float:
    """Bulk-insert ``data`` (and one ``ce_audit_turn`` row of ``audit_row`` per turn); seconds taken."""
    started = time.perf_counter()
    engine = create_sync_engine(parse_database_url(url))
    tables = ((CeConversation.__table__, data.conversations), (CeConversationStep.__table__, data.steps),
              (CeMcpUserFeedback.__table__, data.feedback))
    with engine.begin() as conn:
        for table, rows in tables:
            for i in range(0, len(rows), BATCH):
                conn.execute(sa.insert(table), rows[i:i + BATCH])
        if audit_row is not None:
            audit = [{"conversation_id": s["conversation_id"], "created_at": s["created_at"], "events": audit_row}
                     for s in data.steps]
            for i in range(0, len(audit), BATCH):
                conn.execute(sa.insert(CeAuditTurn.__table__), audit[i:i + BATCH])
    engine.dispose()
    return time.perf_counter() - started


async def recorded_turn(url: str) -> tuple[bytes, int]:
    """A real support-desk turn's packed audit row and how many events it holds."""
    from convengine.audit.packing import unpack

    async with await Engine.aopen(url, **SUPPORT_DESK.options()) as engine:
        result = await engine.aprocess(SUPPORT_DESK.messages[0])
    db = create_sync_engine(parse_database_url(url))
    with db.connect() as conn:
        row = conn.execute(sa.select(CeAuditTurn.__table__).where(
            CeAuditTurn.conversation_id == result.conversation_id)).first()
        for table in (CeConversationStep.__table__, CeConversation.__table__):  # count only what is generated
            conn.execute(sa.delete(table))
        conn.commit()
    db.dispose()
    assert row is not None
    return row.events, len(unpack(row.audit_turn_id, row.conversation_id, row.created_at, row.events))


QUERIES = (("total", ""), ("by intent", "intent"), ("by state", "state"), ("by day", "day"),
           ("by intent,day", "intent,day"))


async def _time(engine: Engine, by: str, since: datetime | None, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await engine.astats(by=by, since=since)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def measure_backend(url: str, saver: str, events: int, repeat: int) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    upgrade(parse_database_url(url))
    row, per_turn = await recorded_turn(url)
    data = generate(max(1, events // per_turn))
    seconds = insert(url, data, row)
    rows, measured = [], []
    async with await Engine.aopen(url) as engine:
        for label, by in QUERIES:
            for window, since in (("all", None), ("7 days", datetime.now(UTC) - timedelta(days=7))):
                times = await _time(engine, by, since, repeat)
                p50, worst = statistics.median(times), max(times)
                rows.append([saver, len(data.steps) * per_turn, len(data.steps), len(data.conversations),
                             f"{seconds:.1f}", label, window, f"{p50:.1f}", f"{worst:.1f}"])
                measured.append({"saver": saver, "events": len(data.steps) * per_turn, "events_per_turn": per_turn,
                                 "turns": len(data.steps), "conversations": len(data.conversations),
                                 "insert_s": round(seconds, 2), "query": label, "window": window,
                                 "p50_ms": round(p50, 2), "max_ms": round(worst, 2), "repeat": repeat})
    return rows, measured


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)

    async def measure(folder: Path, pg_url: str | None) -> tuple[list[list[Any]], list[dict[str, Any]]]:
        rows, measured = [], []
        backends = [("sqlite", None)] + ([] if args.sqlite_only or pg_url is None else [("postgres", pg_url)])
        for saver, url in backends:
            database = fresh_database(saver, url, folder)
            got = await measure_backend(database, saver, args.events, args.repeat)
            rows += got[0]
            measured += got[1]
        return rows, measured

    return run_and_report("analytics", TITLE, HEADER, measure, postgres=not args.sqlite_only, results=args.results)


if __name__ == "__main__":
    main()
