"""Load and crashes over HTTP: concurrent turns on one conversation, a server killed mid-turn."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import assert_linear, checkpoint_chain, engine_on
from tests.servers import Server, post, read_events

pytestmark = pytest.mark.asyncio


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    # every checkpoint kept, so the test can check that their chain never forks
    running = Server(db_url, tmp_path / "server.log", env={"CONVENGINE_CHECKPOINT_PRUNE_EVERY": "0"})
    yield running
    running.stop()


async def test_fifty_concurrent_messages_to_one_conversation(server: Server, db_url: str) -> None:
    cid = str(uuid.uuid4())
    messages = [f"loan number {i:02d}" for i in range(50)]
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=server.base, timeout=120, limits=limits) as client:
        replies = await asyncio.gather(*(post(client, m, cid) for m in messages))
        audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
    assert all(r["success"] and r["conversationId"] == cid for r in replies)

    # every message was one turn, and no turn began before the previous one ended
    boundaries = [(row["stage"], json.loads(row["payloadJson"]).get("text")) for row in audit
                  if row["stage"] in ("USER_INPUT", "PIPELINE_TIMING")]
    assert [stage for stage, _ in boundaries] == ["USER_INPUT", "PIPELINE_TIMING"] * 50
    recorded = [text for stage, text in boundaries if stage == "USER_INPUT"]
    assert sorted(recorded) == messages

    async with engine_on(db_url, None) as engine:
        state = await engine.astate(cid)
        history = await engine.ahistory(cid)
        checkpoints = await checkpoint_chain(engine, cid)
    assert state["turn"] == 50
    assert [h["user_input"] for h in history] == recorded  # same order as the turns ran
    assert len(checkpoints) == 50
    assert_linear(checkpoints)


async def _kill_during_slow_turn(server: Server, client: httpx.AsyncClient, cid: str) -> None:
    """Send a turn that runs a 1.5 s task and SIGKILL the server as soon as the turn has started."""
    events: list[tuple[str, dict[str, Any], float]] = []
    async with client.stream("GET", f"/api/v1/conversation/stream/{cid}") as response:
        reader = asyncio.create_task(read_events(response, "USER_INPUT", events))
        while not events:
            await asyncio.sleep(0.05)
        turn = asyncio.create_task(client.post("/api/v1/conversation/message",
                                               json={"message": "second loan slowly", "conversationId": cid}))
        await asyncio.wait_for(reader, timeout=30)
        server.kill()
    with pytest.raises(httpx.HTTPError):
        await turn
    assert any(name == "USER_INPUT" and data["payload"]["text"] == "second loan slowly" for name, data, _ in events)


async def test_a_server_killed_mid_turn_continues_from_the_last_completed_turn(db_url: str, tmp_path: Path) -> None:
    cid = str(uuid.uuid4())
    first = Server(db_url, tmp_path / "first.log")
    try:
        async with httpx.AsyncClient(base_url=first.base, timeout=60) as client:
            assert (await post(client, "loan please", cid))["state"] == "START"
            await _kill_during_slow_turn(first, client, cid)
    finally:
        first.stop()

    second = Server(db_url, tmp_path / "second.log")
    try:
        async with httpx.AsyncClient(base_url=second.base, timeout=60) as client:
            audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
            texts = [json.loads(row["payloadJson"])["text"] for row in audit if row["stage"] == "USER_INPUT"]
            assert texts == ["loan please"]  # the killed turn left nothing behind
            reply = await post(client, "hello", cid)
            assert (reply["success"], reply["intent"], reply["state"]) == (True, "GREETING", "IDLE")
    finally:
        second.stop()
    async with engine_on(db_url, None) as engine:
        state = await engine.astate(cid)
        assert state["turn"] == 2
        assert [h["user_input"] for h in await engine.ahistory(cid)] == ["loan please", "hello"]
        assert_linear(await checkpoint_chain(engine, cid))
