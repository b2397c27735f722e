"""Servers killed at random points never leave a turn half-recorded, on SQLite and PostgreSQL.

A child process runs support-desk conversations through the Python API and is killed over and
over: by itself (SIGKILL) at the riskiest points of a turn's commit (after the checkpoint was
written and before the rows, between the rows and the commit, right after the commit), or by
this test after a random delay. Afterwards every conversation must agree with itself: the
checkpoint's turn number, the number of history rows, the turns in the audit and the
``ce_conversation`` projection; and no conversation row may exist without a checkpoint.

``CONVENGINE_KILLS`` sets the number of kills per backend (default 30).
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError
from convengine.db import create_sync_engine, parse_database_url
from tests.helpers import engine_on, split_turns

ROOT = Path(__file__).parents[2]
KILLS = int(os.environ.get("CONVENGINE_KILLS", "30"))
CONVERSATIONS = 5
READY_TIMEOUT_S = 120.0
T = TypeVar("T")

CHILD = textwrap.dedent("""
    import os, random, signal, sys
    from pathlib import Path
    from convengine.checkpointing import bound
    from convengine.config_loader.companions import pack_options
    from convengine.engine import Engine
    from convengine.checkpointing import persistence

    url, seed, ids = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    rng = random.Random(seed)
    point = rng.choice(["before_rows", "before_commit", "after_commit", "none"])
    die_on = rng.randint(1, 6)
    turns = 0

    def die_at(name):
        if name == point and turns == die_on:
            os.kill(os.getpid(), signal.SIGKILL)

    commit_turn, commit_connection = persistence.ConversationStore.commit_turn, bound.commit_turn_connection

    async def patched_commit_turn(self, conn, **kwargs):
        global turns
        turns += 1
        die_at("before_rows")
        await commit_turn(self, conn, **kwargs)
        die_at("after_commit")

    async def patched_commit_connection(conn):
        die_at("before_commit")
        await commit_connection(conn)

    persistence.ConversationStore.commit_turn = patched_commit_turn
    persistence.commit_turn_connection = patched_commit_connection
    options = pack_options(Path("examples/support_desk.yaml"))
    options.pop("pack")  # the configuration is in the database already
    engine = Engine.open(url, **options, turn_lock_timeout_s=30)
    print("ready", flush=True)  # the parent's kill timer starts now, not while the child starts up
    messages = ["hello", "I want to cancel my order", "it arrived damaged", "yes", "where is my order", "no",
                "cancel my order", "blah blah"]
    while True:
        engine.process(rng.choice(messages), rng.choice(ids))
""")


@dataclass
class Conversation:
    turn: int
    intent: str | None
    state: str | None
    history: int
    audited_turns: int
    projection: tuple[Any, Any] | None


def run_child(url: str, ids: list[str], seed: int, script: Path) -> str:
    """Run the child until it is killed (by itself, or by us a random delay after its engine opened:
    on a loaded machine starting up takes seconds, and the turns are what this test kills)."""
    child = subprocess.Popen([sys.executable, str(script), url, str(seed), ",".join(ids)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_ready(child, READY_TIMEOUT_S)
        child.wait(timeout=random.Random(seed).uniform(0.8, 2.0))
        how = "self"
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=30)
        how = "timer"
    errors = child.stderr.read().decode() if child.stderr else ""
    for pipe in (child.stdout, child.stderr):
        pipe and pipe.close()
    assert child.returncode == -9, f"child ended with {child.returncode}, not a kill: {errors[-2000:]}"
    return how


def _wait_ready(child: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the child says its engine is open (or it ends), at most ``timeout_s``."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout_s)
    assert ready, f"the child did not open its engine within {timeout_s:g} s"
    line = child.stdout.readline()
    assert line.strip() == b"ready" or child.poll() is not None, f"unexpected child output {line!r}"


async def inspect(url: str, ids: list[str]) -> dict[str, Conversation]:
    found = {}
    async with engine_on(url, None, turn_lock_timeout_s=30) as engine:
        for cid in ids:
            state, audit = await _or_none(engine.astate(cid)) or {}, await _or_none(engine.aaudit(cid)) or []
            turns = [t for t in split_turns(audit) if any(e.stage == "USER_INPUT" for e in t)
                     and not any(e.stage.startswith("ENGINE_") and "FAILURE" in e.stage for e in t)]
            found[cid] = Conversation(int(state.get("turn") or 0), state.get("intent"), state.get("state"),
                                      len(await _or_none(engine.ahistory(cid)) or []), len(turns),
                                      projection(url, cid))
    return found


async def _or_none(read: Awaitable[T]) -> T | None:
    """What ``read`` returns; None for a conversation the engine does not know (a child killed before the
    conversation's first turn committed: it must then have no row of any kind either)."""
    try:
        return await read
    except ConversationNotFoundError:
        return None


def projection(url: str, cid: str) -> tuple[Any, Any] | None:
    engine = create_sync_engine(parse_database_url(url))
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT intent_code, state_code FROM ce_conversation WHERE conversation_id = :c"),
                           {"c": cid}).first()
    engine.dispose()
    return None if row is None else (row[0], row[1])


def disagreements(found: dict[str, Conversation]) -> list[str]:
    wrong = []
    for cid, c in found.items():
        if c.turn == 0:
            if c.projection is not None or c.history or c.audited_turns:
                wrong.append(f"{cid}: no checkpoint but row={c.projection} history={c.history} audit={c.audited_turns}")
            continue
        if not (c.turn == c.history == c.audited_turns) or c.projection != (c.intent, c.state):
            wrong.append(f"{cid}: checkpoint turn {c.turn} ({c.intent}/{c.state}), history {c.history}, "
                         f"audited turns {c.audited_turns}, projection {c.projection}")
    return wrong


async def test_servers_killed_at_random_points_leave_every_conversation_consistent(db_url: str,
                                                                                   tmp_path: Path) -> None:
    async with engine_on(db_url, ROOT / "examples" / "support_desk.yaml"):
        pass  # tables and configuration in place before the first child
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ids = [f"00000000-0000-4000-8000-{i:012d}" for i in range(CONVERSATIONS)]
    began = time.monotonic()
    ways = [await asyncio.to_thread(run_child, db_url, ids, seed, script) for seed in range(KILLS)]
    found = await inspect(db_url, ids)
    assert disagreements(found) == [], f"after {KILLS} kills ({ways.count('self')} at commit points)"
    assert sum(c.turn for c in found.values()) >= KILLS, "the children hardly ran any turns"
    assert time.monotonic() - began < 600
