"""A ``TurnSaver`` bound to a turn's transaction: what it writes is seen by no one else until the turn
commits and is gone if the turn rolls back; and why ``keep_latest`` pruning cannot run inside a
PostgreSQL turn, shown on the official saver itself (both backends)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.checkpointing import TurnLocks, open_saver
from convengine.checkpointing.bound import PRUNE_IN_TURN, TurnSaver, commit_turn_connection
from convengine.db import parse_database_url
from convengine.db.engines import create_async_sa_engine

pytestmark = pytest.mark.asyncio


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def put(saver: TurnSaver, thread: str, step: int) -> Any:
    checkpoint = empty_checkpoint()
    return await saver.aput(config(thread), checkpoint, {"source": "loop", "step": step, "parents": {}}, {})


@contextlib.asynccontextmanager
async def savers(db_url: str) -> AsyncIterator[tuple[TurnSaver, TurnLocks]]:
    url = parse_database_url(db_url)
    engine = create_async_sa_engine(url)
    try:
        async with open_saver(url, pool_size=4) as shared:
            yield TurnSaver(shared), TurnLocks(url, engine, timeout_s=10)
    finally:
        await engine.dispose()


async def steps(saver: TurnSaver, thread: str) -> list[int]:
    """The thread's checkpoints as the shared saver (anyone outside the turn) sees them, newest first."""
    return [c.metadata["step"] async for c in saver.shared.alist(config(thread))]


async def test_a_turns_checkpoints_are_seen_by_others_only_once_it_commits(db_url: str) -> None:
    async with savers(db_url) as (saver, locks):
        await put(saver, "t", 1)  # unbound: committed at once
        conn: AsyncConnection | None
        async with locks.hold("t") as conn, saver.bind(conn):
            assert conn is not None
            await put(saver, "t", 2)
            inside = [c.metadata["step"] async for c in saver.alist(config("t"))]
            assert inside == [2, 1]  # the turn reads its own write...
            assert await steps(saver, "t") == [1]  # ...which no one else sees yet
            await commit_turn_connection(conn)
        assert await steps(saver, "t") == [2, 1]


async def test_a_turn_that_does_not_commit_leaves_no_checkpoint(db_url: str) -> None:
    async with savers(db_url) as (saver, locks):
        await put(saver, "t", 1)
        with pytest.raises(RuntimeError, match="the turn failed"):
            async with locks.hold("t") as conn, saver.bind(conn):
                await put(saver, "t", 2)
                await saver.aput_writes((await saver.aget_tuple(config("t"))).config, [("messages", "x")], "task-1")
                await saver.adelete_thread("other")
                raise RuntimeError("the turn failed")
        assert await steps(saver, "t") == [1]
        found = await saver.aget_tuple(config("t"))
        assert found is not None and found.metadata["step"] == 1 and not found.pending_writes


async def test_outside_a_turn_every_call_goes_to_the_shared_saver(db_url: str) -> None:
    async with savers(db_url) as (saver, locks):
        assert saver.target is saver.shared
        async with locks.hold("t") as conn, saver.bind(conn):
            bound = saver.target
            assert bound is not saver.shared
        assert saver.target is saver.shared
        async with saver.bind(None):  # no turn connection (an engine without one): nothing is bound
            assert saver.target is saver.shared


async def test_keep_latest_in_a_turn_is_refused_on_postgresql_before_it_touches_the_turn(db_url: str) -> None:
    """On SQLite it prunes in the turn's transaction; on PostgreSQL the official saver's keep_latest starts
    with ``SET TRANSACTION ISOLATION LEVEL REPEATABLE READ``, which PostgreSQL refuses in a transaction that
    already ran a query (the turn's lock): TurnSaver refuses first and the turn goes on."""
    async with savers(db_url) as (saver, locks):
        for step in (1, 2):
            await put(saver, "t", step)
        async with locks.hold("t") as conn, saver.bind(conn):
            assert conn is not None
            await put(saver, "t", 3)
            if conn.dialect.name == "postgresql":
                with pytest.raises(NotImplementedError) as refused:
                    await saver.aprune(["t"], strategy="keep_latest")
                assert str(refused.value) == PRUNE_IN_TURN
                official = saver.target  # the official saver on the turn's connection, unguarded
                with pytest.raises(Exception, match="SET TRANSACTION ISOLATION LEVEL must be called before any query"):
                    await official.aprune(["t"], strategy="keep_latest")
            else:
                await saver.aprune(["t"], strategy="keep_latest")
                assert [c.metadata["step"] async for c in saver.alist(config("t"))] == [3]
            await commit_turn_connection(conn)  # the turn's transaction is still usable
        expected = [3, 2, 1] if db_url.startswith("postgresql") else [3]
        assert await steps(saver, "t") == expected


async def test_delete_pruning_runs_inside_a_turn_and_rolls_back_with_it(db_url: str) -> None:
    async with savers(db_url) as (saver, locks):
        await put(saver, "gone", 1)
        await put(saver, "kept", 1)
        with contextlib.suppress(RuntimeError):
            async with locks.hold("gone") as conn, saver.bind(conn):
                await saver.aprune(["gone"], strategy="delete")
                assert await saver.aget_tuple(config("gone")) is None
                raise RuntimeError("rolled back")
        assert await steps(saver, "gone") == [1]
        async with locks.hold("gone") as conn, saver.bind(conn):
            assert conn is not None
            await saver.aprune(["gone"], strategy="delete")
            await commit_turn_connection(conn)
        assert await steps(saver, "gone") == [] and await steps(saver, "kept") == [1]
