"""Serialised turns, killed processes, flat checkpoints: the conversation is never forked or half-written."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError
from convengine.db import create_sync_engine, parse_database_url
from tests.helpers import assert_linear, checkpoint_chain, engine_on, pack

pytestmark = pytest.mark.asyncio


async def test_twenty_concurrent_turns_on_one_conversation_are_serialised(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = str(uuid.uuid4())
        results = await asyncio.gather(*(engine.aprocess(f"loan {i}", cid) for i in range(20)))
        assert sorted(r.turn for r in results) == list(range(1, 21))
        state = await engine.astate(cid)
        assert state["turn"] == 20
        history = await engine.ahistory(cid)
        assert len(history) == 20
        checkpoints = await checkpoint_chain(engine, cid)
        assert len(checkpoints) == 20  # durability="exit": one checkpoint per turn
        assert_linear(checkpoints)


async def test_two_engines_on_one_database_serialise_through_the_database(db_url: str) -> None:
    async with engine_on(db_url, pack()) as first, engine_on(db_url, None) as second:
        cid = str(uuid.uuid4())
        await first.aprocess("hello", cid)
        runs = [first.aprocess(f"loan {i}", cid) for i in range(6)] + [second.aprocess(f"loan {i}", cid)
                                                                      for i in range(6)]
        await asyncio.gather(*runs)
        assert (await first.astate(cid))["turn"] == 13
        assert len(await second.ahistory(cid)) == 13
        assert_linear(await checkpoint_chain(first, cid))


async def test_a_busy_conversation_waits_then_reports_clearly(db_url: str) -> None:
    from convengine.catalog.errors import ConversationBusyError
    from convengine.nodes.common import Step

    async def slow(turn: Any) -> None:
        await asyncio.sleep(1.5)

    async with engine_on(db_url, pack(), steps=[Step("slow", slow, after="rules")], turn_lock_timeout_s=0.3) as engine:
        cid = str(uuid.uuid4())
        outcomes = await asyncio.gather(engine.aprocess("loan", cid), engine.aprocess("loan", cid),
                                        return_exceptions=True)
        busy = [o for o in outcomes if isinstance(o, ConversationBusyError)]
        assert len(busy) == 1 and busy[0].recoverable and "is busy" in busy[0].message
        assert (await engine.astate(cid))["turn"] == 1


async def test_a_turn_another_engine_holds_too_long_reports_busy(db_url: str) -> None:
    """The database's lock (a lock file on SQLite, an advisory lock on PostgreSQL) keeps a second
    engine out of a conversation another engine's turn holds, for at most its lock timeout."""
    from convengine.catalog.errors import ConversationBusyError
    from convengine.nodes.common import Step

    async def slow(turn: Any) -> None:
        if turn.user_text == "slow":
            await asyncio.sleep(1.5)

    async with engine_on(db_url, pack(), steps=[Step("slow", slow, after="rules")]) as first, \
            engine_on(db_url, None, turn_lock_timeout_s=0.3) as second:
        cid = str(uuid.uuid4())
        held = asyncio.create_task(first.aprocess("slow", cid))
        await asyncio.sleep(0.5)
        with pytest.raises(ConversationBusyError, match="is busy"):
            await second.aprocess("loan", cid)
        assert (await held).turn == 1
        assert (await second.aprocess("loan", cid)).turn == 2  # free again once the turn ended


CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    from convengine.engine import Engine
    from convengine.nodes.common import Step
    url, cid, signal_file, messages = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4].split(",")

    async def stall(turn):
        if turn.user_text == "second":
            signal_file.write_text("in the middle of turn 2")
            await asyncio.sleep(60)

    engine = Engine.open(url, steps=[Step("stall", stall, after="rules")])
    for message in messages:
        engine.process(message, cid)
""")


def kill_in_the_middle(db_url: str, cid: str, messages: list[str], folder: Path) -> None:
    """Run ``messages`` in a child process and SIGKILL it while it runs the one named "second"."""
    script, signal_file = folder / "child.py", folder / "signal"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), db_url, cid, str(signal_file), ",".join(messages)],
                             cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 60
        while not signal_file.exists():
            assert child.poll() is None, "child exited early"
            assert time.monotonic() < deadline, "child never reached the turn"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()


async def test_a_process_killed_mid_turn_leaves_the_previous_turn(db_url: str, tmp_path: Path) -> None:
    async with engine_on(db_url, pack()):
        pass  # import the pack and create the tables
    cid = str(uuid.uuid4())
    await asyncio.to_thread(kill_in_the_middle, db_url, cid, ["loan please", "second"], tmp_path)
    async with engine_on(db_url, None, turn_lock_timeout_s=10) as engine:
        state = await engine.astate(cid)
        assert (state["turn"], state["intent"], state["state"]) == (1, "LOAN", "START")
        assert [h["user_input"] for h in await engine.ahistory(cid)] == ["loan please"]
        result = await engine.aprocess("hello", cid)
        assert (result.turn, result.intent) == (2, "GREETING")


async def test_a_first_turn_killed_midway_leaves_no_conversation_behind(db_url: str, tmp_path: Path) -> None:
    async with engine_on(db_url, pack()):
        pass
    cid = str(uuid.uuid4())
    await asyncio.to_thread(kill_in_the_middle, db_url, cid, ["second"], tmp_path)
    async with engine_on(db_url, None, turn_lock_timeout_s=10) as engine:
        assert not await engine.acheck_access(cid)  # no ce_conversation row, so no history or audit either
        with pytest.raises(ConversationNotFoundError):
            await engine.astate(cid)  # and no checkpoint
        result = await engine.aprocess("loan please", cid)
        assert result.turn == 1


def checkpoint_bytes(db_url: str, cid: str) -> int:
    url = parse_database_url(db_url)
    engine = create_sync_engine(url)
    with engine.connect() as conn:
        if url.is_postgres:
            query = ("SELECT COALESCE((SELECT SUM(pg_column_size(checkpoint) + pg_column_size(metadata)) "
                     "FROM checkpoints WHERE thread_id = :t), 0) + COALESCE((SELECT SUM(octet_length(blob)) "
                     "FROM checkpoint_blobs WHERE thread_id = :t), 0) + COALESCE((SELECT SUM(octet_length(blob)) "
                     "FROM checkpoint_writes WHERE thread_id = :t), 0)")
        else:
            query = ("SELECT COALESCE((SELECT SUM(length(checkpoint) + length(metadata)) FROM checkpoints "
                     "WHERE thread_id = :t), 0) + COALESCE((SELECT SUM(length(value)) FROM writes "
                     "WHERE thread_id = :t), 0)")
        total = int(conn.execute(sa.text(query), {"t": cid}).scalar_one())
    engine.dispose()
    return total


@pytest.mark.slow
async def test_checkpoint_bytes_per_turn_stay_flat(db_url: str) -> None:
    # The window of recent turns is bounded (5 here, so it is full from turn 6 on); nothing else grows.
    data = pack(settings={"flow": {"conversation-history": {"max-turns": 5}}, "checkpoint-prune-every": 0})
    async with engine_on(db_url, data) as engine:
        cid = str(uuid.uuid4())
        sizes: dict[int, int] = {}
        previous = 0
        for turn in range(1, 301):
            await engine.aprocess(f"loan number {turn % 1000:03d}", cid)
            if turn in (9, 10, 299, 300):
                total = checkpoint_bytes(db_url, cid)
                sizes[turn] = total - previous
            previous = checkpoint_bytes(db_url, cid) if turn in (9, 299) else previous
        per_turn_10, per_turn_300 = sizes[10], sizes[300]
        assert per_turn_10 > 0
        assert abs(per_turn_300 - per_turn_10) <= 0.10 * per_turn_10, sizes


async def test_older_checkpoints_are_pruned_and_the_conversation_carries_on(db_url: str) -> None:
    # undo off: keep only the latest (with undo on, pruning keeps what undo needs: tests/memory)
    async with engine_on(db_url, pack(settings={"checkpoint-prune-every": 10,
                                                "conversation_memory": {"undo_depth": 0}})) as engine:
        cid = str(uuid.uuid4())
        for i in range(23):
            await engine.aprocess("hello" if i % 2 else f"loan {i}", cid)
        checkpoints = await checkpoint_chain(engine, cid)
        assert len(checkpoints) == 4  # the one kept at turn 20, then turns 21-23
        assert_linear(checkpoints)
        state = await engine.astate(cid)
        assert state["turn"] == 23 and state["intent"] == "LOAN"
        assert [t["user"] for t in state["recent_turns"]][-2:] == ["hello", "loan 22"]
        assert len(await engine.ahistory(cid)) == 23  # history and audit are never pruned
        assert (await engine.aprocess("hello", cid)).turn == 24
    async with engine_on(db_url, pack(settings={"checkpoint-prune-every": 0})) as engine:
        cid = str(uuid.uuid4())
        for _ in range(12):
            await engine.aprocess("hello", cid)
        assert len(await checkpoint_chain(engine, cid)) == 12
