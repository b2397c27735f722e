"""``convengine serve --workers N``: N processes on one port and one PostgreSQL database; any worker
serves any turn of a conversation and a stream on one connection sees every turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.conftest import PACKS
from tests.servers import Server, free_port, read_events

pytestmark = pytest.mark.asyncio
TURNS = 12


def listening_workers(url: str) -> int:
    """Server processes LISTENing for live events on this database (one per worker)."""
    db = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with db.connect() as conn:
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query ILIKE 'LISTEN%'")).scalar_one())
    finally:
        db.dispose()


def wait_for_workers(url: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while listening_workers(url) < count:
        assert time.monotonic() < deadline, f"fewer than {count} workers started"
        time.sleep(0.2)


async def one_turn(base: str, message: str, cid: str) -> dict[str, Any]:
    """A turn on a connection of its own, so the kernel may hand it to either worker."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        reply = await client.post("/api/v1/conversation/message", json={"message": message, "conversationId": cid})
        assert reply.status_code == 200, reply.text
        return reply.json()


async def test_two_workers_serve_one_conversation_consistently(backend: str, db_url: str, tmp_path: Path) -> None:
    if backend == "sqlite":
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "convengine.cli", "serve", "--url", db_url, "--port",
                               str(free_port()), "--llm", "none", "--workers", "2", "--pack",
                               str(PACKS / "api_pack.yaml")], capture_output=True, text=True, timeout=120,
                              check=False, env=os.environ)
        assert done.returncode == 2
        assert "--workers 2 needs a PostgreSQL database" in done.stderr
        return
    server = Server(db_url, tmp_path / "server.log", "--workers", "2")
    try:
        wait_for_workers(db_url, 2)
        cid = str(uuid.uuid4())
        events: list[tuple[str, dict[str, Any], float]] = []
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as watcher, \
                watcher.stream("GET", f"/api/v1/conversation/stream/{cid}") as stream:
            reader = asyncio.create_task(read_events(stream, "never-sent", events))
            while not events:
                await asyncio.sleep(0.05)
            first = await one_turn(server.base, "hello", cid)
            replies = await asyncio.gather(*(one_turn(server.base, f"a loan {i}", cid) for i in range(TURNS)))
            deadline = time.monotonic() + 30
            while sum(name == "ENGINE_RETURN" for name, _, _ in events) < TURNS + 1:
                assert time.monotonic() < deadline, "the stream missed turns served by the other worker"
                await asyncio.sleep(0.05)
            reader.cancel()
        assert first["intent"] == "GREETING"
        assert all(r["success"] and r["intent"] == "LOAN" and r["conversationId"] == cid for r in replies)
        async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
            audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
        inputs = [row for row in audit if row["stage"] == "USER_INPUT"]
        assert len(inputs) == TURNS + 1
        stages = [row["stage"] for row in audit]
        # turns never interleave: each USER_INPUT is followed by its own turn's ENGINE_RETURN first
        opened = 0
        for stage in stages:
            if stage == "USER_INPUT":
                assert opened == 0, "two turns of one conversation ran at once"
                opened = 1
            elif stage == "ENGINE_RETURN":
                opened = 0
        streamed = sorted(payload["payload"]["text"] for name, payload, _ in events if name == "USER_INPUT")
        assert streamed == sorted(["hello", *(f"a loan {i}" for i in range(TURNS))])
    finally:
        server.stop()
    assert listening_workers(db_url) == 0  # stopping the server stopped its workers


@pytest.fixture
def pg_db_url() -> Any:
    from tests.conftest import drop_postgres_database, new_postgres_database

    url = new_postgres_database()
    yield url
    drop_postgres_database(url)


async def notices_during_turn(listener: Any, base: str, cid: str) -> list[str]:
    """The convengine_audit NOTIFY payloads sent while one turn of ``cid`` runs (and shortly after)."""
    await one_turn(base, "hello", cid)
    received = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            async for notice in listener.notifies():
                if notice.channel == "convengine_audit":
                    received.append(notice.payload)
    return received


async def test_events_cross_processes_only_for_watched_conversations(pg_db_url: str, tmp_path: Path) -> None:
    """A server sends a turn's events to the other processes only while one of them says it streams that
    conversation (or every conversation); unwatched turns cost no NOTIFY traffic."""
    import psycopg

    server = Server(pg_db_url, tmp_path / "server.log")
    try:
        async with await psycopg.AsyncConnection.connect(pg_db_url, autocommit=True) as listener:
            await listener.execute("LISTEN convengine_audit")
            watched, other = str(uuid.uuid4()), str(uuid.uuid4())
            assert await notices_during_turn(listener, server.base, watched) == []
            await listener.execute("SELECT pg_notify('convengine_audit_watch', %s)", (f"elsewhere|={watched}",))
            await asyncio.sleep(0.3)
            sent = await notices_during_turn(listener, server.base, watched)
            assert sent and all(watched in payload for payload in sent)
            assert any('"stage": "USER_INPUT"' in payload for payload in sent)
            assert await notices_during_turn(listener, server.base, other) == []
            await listener.execute("SELECT pg_notify('convengine_audit_watch', 'elsewhere|=*')")
            await asyncio.sleep(0.3)
            assert await notices_during_turn(listener, server.base, other)
            await listener.execute("SELECT pg_notify('convengine_audit_watch', 'elsewhere|=')")
            await asyncio.sleep(0.3)
            assert await notices_during_turn(listener, server.base, watched) == []
    finally:
        server.stop()
