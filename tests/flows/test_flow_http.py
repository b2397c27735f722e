"""Flows over HTTP: the welcome event, a handoff seen live on the SSE stream, and the admin resume."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.auth_support import ADMIN, USER_A, USER_B, auth_env, bearer, send
from tests.servers import Server, read_events

pytestmark = pytest.mark.asyncio
PACK = Path(__file__).resolve().parents[2] / "examples" / "flows_assistant.yaml"


async def test_welcome_handoff_stream_and_admin_resume(db_url: str, tmp_path: Path) -> None:
    server = Server(db_url, tmp_path / "server.log", pack=PACK, env=auth_env())
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            started = await client.post("/api/v1/conversation/start", json={}, headers=bearer(USER_A))
            assert started.status_code == 200, started.text
            body = started.json()
            assert body["success"] and body["status"] == "RUNNING"
            assert body["payload"]["value"]["messages"][0]["text"].startswith("Hi, I am the loan assistant")
            cid = body["conversationId"]
            for text in ("I want a loan", "x", "y", "z"):
                reply = (await send(client, USER_A, text, cid)).json()
            assert reply["payload"]["value"] == "Let me connect you with a loan officer."

            events: list[tuple[str, dict[str, Any], float]] = []
            async with client.stream("GET", f"/api/v1/conversation/stream/{cid}", headers=bearer(USER_A)) as stream:
                reader = asyncio.create_task(read_events(stream, "FLOW_HANDOFF_MESSAGE", events))
                await asyncio.sleep(0.5)
                silent = (await send(client, USER_A, "hello? a human please", cid)).json()
                await asyncio.wait_for(reader, 20)
            assert silent["payload"] == {"type": "HANDOFF", "value": ""}
            assert events[-1][1]["payload"]["text"] == "hello? a human please"

            path = f"/api/v1/conversation/{cid}/handoff/resume"
            refused = await client.post(path, headers=bearer(USER_A))
            assert refused.status_code == 403
            resumed = await client.post(path, headers=bearer(ADMIN))
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["status"] == "RUNNING"
            assert resumed.json()["payload"]["value"].endswith("How much would you like to borrow?")
            again = await client.post(path, headers=bearer(ADMIN))
            assert again.status_code == 422 and "not handed off" in again.text

            other = await client.post("/api/v1/conversation/start", json={"conversationId": cid},
                                      headers=bearer(USER_B))
            assert other.status_code == 404  # another caller's conversation
    finally:
        server.stop()
