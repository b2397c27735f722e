"""The HTTP API, driven with a real HTTP client against `convengine serve` running in a subprocess."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import Server, post, read_events

pytestmark = pytest.mark.asyncio


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(db_url, tmp_path / "server.log")
    yield running
    running.stop()


async def test_message_audit_and_trace(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        first = await post(client, "hello")
        assert first["success"] is True and (first["intent"], first["state"]) == ("GREETING", "IDLE")
        assert first["payload"] == {"type": "TEXT", "value": "Hello there"}
        assert isinstance(first["context"], str) and json.loads(first["context"]) == json.loads(first["context"])
        cid = first["conversationId"]
        second = await post(client, "a loan please", cid, inputParams={"channel": "web"})
        assert (second["intent"], second["state"], second["conversationId"]) == ("LOAN", "START", cid)
        audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
        stages = [row["stage"] for row in audit]
        assert stages.count("USER_INPUT") == 2 and stages[-2:] == ["PIPELINE_TIMING", "STEP_EXIT"]
        assert set(audit[0]) == {"auditId", "conversationId", "stage", "payloadJson", "createdAt"}
        assert json.loads(audit[0]["payloadJson"])["_meta"]["conversationId"] == cid
        trace = (await client.get(f"/api/v1/conversation/audit/{cid}/trace")).json()
        assert trace["conversationId"] == cid and trace["steps"][0]["step"] == "load_or_create_conversation"
        assert all(step["status"] == "OK" for step in trace["steps"])
        blocked = await post(client, "my password is 1234", cid)
        assert blocked["payload"]["value"] == "Please keep passwords to yourself."


async def test_reset_and_engine_errors_use_convengine_contract(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        first = await post(client, "a loan")
        reset = await post(client, "hello", first["conversationId"], reset=True)
        assert reset["intent"] == "GREETING"
        audit = (await client.get(f"/api/v1/conversation/audit/{first['conversationId']}")).json()
        assert "CONVERSATION_RESET" in [row["stage"] for row in audit]


MALFORMED = [
    ({"message": None, "conversationId": 7}, "body.conversationId: Input should be a valid string"),
    ({"message": "hi", "inputParams": [1, 2]}, "body.inputParams: Input should be a valid dictionary"),
    ({"message": 42}, "body.message: Input should be a valid string"),
    ({"message": "hi", "reset": "maybe"}, "body.reset: Value error, reset must be true or false"),
    ({"message": "hi", "conversationId": "not-a-uuid"}, "conversation_id 'not-a-uuid' is not a UUID"),
    ({"message": "bad \u0000 nul"}, "NUL character"),
]


async def test_malformed_requests_get_422_with_a_clear_message(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for body, message in MALFORMED:
            response = await client.post("/api/v1/conversation/message", json=body)
            assert response.status_code == 422, (body, response.text)
            assert message in response.json()["message"], (body, response.json())
        response = await client.post("/api/v1/conversation/message", content=b"{not json",
                                     headers={"content-type": "application/json"})
        assert response.status_code == 422
        assert "the body is not valid JSON: Expecting property name" in response.json()["message"]
        response = await client.post("/api/v1/conversation/message", content=b"\xff\xfe\x00bin",
                                     headers={"content-type": "application/json"})
        assert response.status_code == 422


async def test_oversized_messages_get_413(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        response = await client.post("/api/v1/conversation/message", json={"message": "x" * 100_001})
        assert response.status_code == 413 and "limit is 100000" in response.json()["message"]
        response = await client.post("/api/v1/conversation/message", content=b"x" * 3_000_000,
                                     headers={"content-type": "application/json"})
        assert response.status_code == 413 and "exceeds" in response.json()["message"]


async def test_unknown_and_malformed_conversation_ids(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        unknown = str(uuid.uuid4())
        audit = await client.get(f"/api/v1/conversation/audit/{unknown}")
        assert (audit.status_code, audit.json()) == (200, [])  # ConvEngine: not started yet, nothing to show
        trace = await client.get(f"/api/v1/conversation/audit/{unknown}/trace")
        assert (trace.status_code, trace.json()) == (200, {"conversationId": unknown, "steps": [], "stages": []})
        response = await client.get("/api/v1/conversation/audit/abc")
        assert response.status_code == 422 and "is not a UUID" in response.json()["message"]


async def test_two_concurrent_messages_to_one_conversation_are_serialised(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        cid = str(uuid.uuid4())
        replies = await asyncio.gather(post(client, "loan slowly", cid), post(client, "hello", cid))
        assert all(r["success"] for r in replies)
        audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
        turns = [json.loads(row["payloadJson"])["text"] for row in audit if row["stage"] == "USER_INPUT"]
        assert sorted(turns) == ["hello", "loan slowly"]
        timings = [i for i, row in enumerate(audit) if row["stage"] == "PIPELINE_TIMING"]
        starts = [i for i, row in enumerate(audit) if row["stage"] == "USER_INPUT"]
        assert starts[0] < timings[0] < starts[1] < timings[1]  # the second turn began after the first ended


async def test_sse_streams_events_live_while_the_turn_runs(server: Server) -> None:
    cid = str(uuid.uuid4())
    events: list[tuple[str, dict[str, Any], float]] = []
    async with (httpx.AsyncClient(base_url=server.base, timeout=60) as client,
                client.stream("GET", f"/api/v1/conversation/stream/{cid}") as response):
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = asyncio.create_task(read_events(response, "PIPELINE_TIMING", events))
        while not events:
            await asyncio.sleep(0.05)
        assert events[0][0] == "CONNECTED" and events[0][1] == {"conversationId": cid, "transport": "SSE"}
        reply = await post(client, "loan slowly", cid)
        replied_at = time.monotonic()
        await asyncio.wait_for(reader, timeout=30)
    names = [name for name, _, _ in events]
    assert reply["success"]
    assert names.index("USER_INPUT") < names.index("SET_TASK") < names.index("ENGINE_RETURN")
    user_input = next(e for e in events if e[0] == "USER_INPUT")
    assert user_input[1]["eventType"] == "AUDIT" and user_input[1]["stage"] == "USER_INPUT"
    assert user_input[1]["payload"]["text"] == "loan slowly"
    assert user_input[2] < replied_at - 1.0  # seen while the slow task was still running


async def test_cache_refresh_analyze_health_and_openapi(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        refreshed = await client.post("/api/v1/cache/refresh")
        assert refreshed.status_code == 200 and "configuration version" in refreshed.text
        analysis = (await client.get("/api/v1/cache/analyze")).json()
        assert analysis["snapshot"]["tables"]["ce_intent"] == {"rows": 2, "enabled": 2}
        assert (await client.get("/health")).json()["status"] == "ok"
        spec = (await client.get("/openapi.json")).json()
        assert "/api/v1/conversation/message" in spec["paths"]
        assert (await client.get("/docs")).status_code == 200


@pytest.fixture
def pg_db_url() -> Iterator[str]:
    from tests.conftest import drop_postgres_database, new_postgres_database

    url = new_postgres_database()
    yield url
    drop_postgres_database(url)


async def test_events_stream_across_server_processes_through_postgres(pg_db_url: str, tmp_path: Path) -> None:
    """A client subscribed on server A sees the live events of a turn that server B processes."""
    first, second = Server(pg_db_url, tmp_path / "a.log"), None
    try:
        second = Server(pg_db_url, tmp_path / "b.log")
        cid = str(uuid.uuid4())
        events: list[tuple[str, dict[str, Any], float]] = []
        async with (httpx.AsyncClient(base_url=first.base, timeout=60) as a,
                    httpx.AsyncClient(base_url=second.base, timeout=60) as b,
                    a.stream("GET", f"/api/v1/conversation/stream/{cid}") as response):
            reader = asyncio.create_task(read_events(response, "PIPELINE_TIMING", events))
            while not events:
                await asyncio.sleep(0.05)
            reply = await post(b, "loan slowly", cid)
            replied_at = time.monotonic()
            await asyncio.wait_for(reader, timeout=30)
        assert reply["success"] and reply["intent"] == "LOAN"
        names = [name for name, _, _ in events]
        assert names[0] == "CONNECTED"
        assert names.index("USER_INPUT") < names.index("SET_TASK") < names.index("ENGINE_RETURN")
        user_input = next(e for e in events if e[0] == "USER_INPUT")
        assert user_input[1]["payload"]["text"] == "loan slowly"
        assert user_input[2] < replied_at - 1.0  # live, not after the turn
    finally:
        first.stop()
        if second is not None:
            second.stop()
