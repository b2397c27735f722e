"""LangGraph's checkpointer conformance suite against the engine's checkpointer, :class:`TurnSaver`.

The engine compiles its graph with a ``TurnSaver``: outside a turn it forwards to the official
saver of the backend; inside a turn (``TurnLocks.hold`` + ``TurnSaver.bind``) it forwards to that
saver bound to the turn's connection, committed with the turn's rows. The suite runs in three
modes: unbound; every call in a turn of its own, committed (how deleting a user's conversations
uses it); and a whole capability suite inside one turn (how a turn's graph run or ``Engine.seed``
reads and writes checkpoints before the single commit).

A fourth mode runs each capability suite inside one turn and rolls the turn back: the suite
passes as in ``one_turn`` and the database holds no checkpoint row afterwards, so every read and
write the suite made went through the turn's transaction and none escaped to the shared saver.

Capabilities: the five base ones and ``prune`` (the PostgreSQL saver has it; on SQLite the
engine's own prune stands in) must pass, except ``keep_latest`` pruning on PostgreSQL inside a
turn: that prune needs a REPEATABLE READ transaction of its own (its first statement sets the
isolation level, which PostgreSQL refuses once a transaction has run a query), so a bound
``TurnSaver`` refuses it with a clear error (the engine prunes after the turn commits);
``delete`` pruning runs in the turn. ``test_bound.py`` shows the official saver failing there.
``delete_for_runs`` and ``copy_thread`` are implemented by neither official saver, so
``TurnSaver`` does not claim them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, Capability, DetectedCapabilities
from langgraph.checkpoint.conformance.report import CapabilityReport
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.checkpointing import TurnLocks, open_saver
from convengine.checkpointing.bound import PRUNE_IN_TURN, TurnSaver, commit_turn_connection
from convengine.db import create_sync_engine, parse_database_url
from convengine.db.engines import create_async_sa_engine

CLAIMED = {c.value for c in BASE_CAPABILITIES | {Capability.PRUNE}}
NOT_CLAIMED = {Capability.DELETE_FOR_RUNS.value, Capability.COPY_THREAD.value}  # neither official saver has them
MODES = ("unbound", "turn_per_call", "one_turn", "one_turn_rolled_back")
BOUND_MODES = MODES[1:]
KEEP_LATEST_IN_TURN = {  # the suite's prune tests that prune a thread with keep_latest
    "test_prune_keep_latest_single_thread", "test_prune_keep_latest_multiple_threads",
    "test_prune_keep_latest_across_namespaces", "test_prune_keep_latest_preserves_writes",
    "test_prune_preserves_other_threads", "test_prune_nonexistent_noop"}
CHECKPOINT_TABLES = {"sqlite": ("checkpoints", "writes"),
                     "postgresql": ("checkpoints", "checkpoint_blobs", "checkpoint_writes")}


class TurnPerCall(TurnSaver):
    """Each call runs as the engine runs a turn: the conversation's lock and connection, the saver
    bound to it, one commit. Overrides exactly the methods ``TurnSaver`` does, so the suite detects
    the same capabilities."""

    def __init__(self, shared: Any, locks: TurnLocks) -> None:
        super().__init__(shared)
        self.locks = locks

    @contextlib.asynccontextmanager
    async def _turn(self, thread_id: Any) -> AsyncIterator[None]:
        async with self.locks.hold(str(thread_id or "conformance")) as conn, self.bind(conn):
            yield
            assert conn is not None
            await commit_turn_connection(conn)

    async def aget_tuple(self, config: Any) -> Any:
        async with self._turn(_thread(config)):
            return await super().aget_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with self._turn(_thread(config)):
            found = [item async for item in super().alist(config, **kwargs)]
        for item in found:
            yield item

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        async with self._turn(_thread(config)):
            return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        async with self._turn(_thread(config)):
            await super().aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        async with self._turn(thread_id):
            await super().adelete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        async with self._turn(thread_ids[0] if thread_ids and not isinstance(thread_ids, str) else None):
            await super().aprune(thread_ids, strategy=strategy)


def _thread(config: Any) -> Any:
    return ((config or {}).get("configurable") or {}).get("thread_id")


@contextlib.asynccontextmanager
async def _one_turn(saver: TurnSaver, locks: TurnLocks, *, commit: bool = True) -> AsyncIterator[None]:
    conn: AsyncConnection | None
    async with locks.hold("conformance") as conn, saver.bind(conn):
        yield
        assert conn is not None
        if commit:
            await commit_turn_connection(conn)  # else the lock's exit rolls the turn back


async def _run(db_url: str, mode: str) -> CapabilityReport:
    url = parse_database_url(db_url)
    engine = create_async_sa_engine(url)
    locks = TurnLocks(url, engine, timeout_s=30)

    @checkpointer_test(name=f"TurnSaver ({url.backend}, {mode})")
    async def turn_saver() -> AsyncIterator[TurnSaver]:
        async with open_saver(url, pool_size=4) as shared:
            if mode == "turn_per_call":
                yield TurnPerCall(shared, locks)
            elif mode in ("one_turn", "one_turn_rolled_back"):
                saver = TurnSaver(shared)
                async with _one_turn(saver, locks, commit=mode == "one_turn"):
                    assert saver.target is not shared, "the suite runs on the turn's connection"
                    yield saver
            else:
                yield TurnSaver(shared)

    try:
        return await validate(turn_saver)
    finally:
        await engine.dispose()


def test_turn_saver_claims_what_the_official_savers_offer() -> None:
    detected = {c.value for c in DetectedCapabilities.from_instance(TurnSaver.__new__(TurnSaver)).detected}
    assert detected == CLAIMED
    per_call = {c.value for c in DetectedCapabilities.from_instance(TurnPerCall.__new__(TurnPerCall)).detected}
    assert per_call == detected


def _stored_rows(db_url: str) -> dict[str, int]:
    url = parse_database_url(db_url)
    engine = create_sync_engine(url)
    try:
        with engine.connect() as conn:
            return {table: int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
                    for table in CHECKPOINT_TABLES[url.backend]}
    finally:
        engine.dispose()


@pytest.mark.parametrize("mode", MODES)
async def test_conformance(db_url: str, mode: str) -> None:
    report = await _run(db_url, mode)
    expected = set(CLAIMED)
    if mode in BOUND_MODES and db_url.startswith("postgresql"):
        expected.remove(Capability.PRUNE.value)  # keep_latest is refused inside a turn (see the module's docstring)
        prune = report.results[Capability.PRUNE.value]
        refused = {str(f).split(":", 1)[0] for f in prune.failures}
        assert refused == KEEP_LATEST_IN_TURN, prune.failures  # delete, and pruning no thread, do run in a turn
        assert all(PRUNE_IN_TURN in str(f) for f in prune.failures), prune.failures
        assert prune.tests_passed == 2
    stored = _stored_rows(db_url)
    if mode == "one_turn_rolled_back":
        assert stored == dict.fromkeys(stored, 0), stored  # nothing the suite did escaped the turn
    else:
        assert stored["checkpoints"] > 0, stored
    failures = {name: [str(f) for f in result.failures] for name, result in report.results.items()
                if name in expected and not result.passed}
    assert not failures, failures
    passed = {name for name, result in report.results.items() if result.passed}
    assert passed == expected, report.results
    assert all(report.results[name].tests_passed > 0 for name in expected)
    assert not any(report.results[name].detected for name in NOT_CLAIMED)
