"""ConvEngine's own front-ends, unchanged, against ``convengine serve``.

The requests are exactly those ConvEngine's React chat widget and admin UI send from their own
origin (a preflight first: they send ``Content-Type: application/json`` even on GETs): the widget
subscribes to the stream and loads the audit panel before the first message, sends messages,
silent submits (``message: ""`` with ``inputParams``) and thumbs; the admin UI reads the trace and
``/cache/analyze?warmup=true``. Each check reads the fields those clients read.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PACKS
from tests.servers import Server, read_events

pytestmark = pytest.mark.asyncio

WIDGET = "http://localhost:5173"
JSON_HEADERS = {"Content-Type": "application/json", "Origin": WIDGET}
CONV = "/api/v1/conversation"


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(db_url, tmp_path / "server.log", "--cors-origin", WIDGET, pack=PACKS / "clients_pack.yaml")
    yield running
    running.stop()


async def preflight(client: httpx.AsyncClient, method: str, path: str) -> None:
    """The browser's CORS preflight for a request with a JSON content type."""
    response = await client.options(path, headers={"Origin": WIDGET, "Access-Control-Request-Method": method,
                                                   "Access-Control-Request-Headers": "content-type"})
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == WIDGET
    assert "content-type" in response.headers["access-control-allow-headers"].lower()


async def call(client: httpx.AsyncClient, method: str, path: str, body: Any = None) -> Any:
    """``fetch`` as the clients call it: preflight, then the request; ``res.ok`` must hold."""
    await preflight(client, method, path)
    response = await client.request(method, path, headers=JSON_HEADERS,
                                    content=None if body is None else json.dumps(body))
    assert response.status_code == 200, (path, response.text)
    assert response.headers["access-control-allow-origin"] == WIDGET
    return response.json()


async def send(client: httpx.AsyncClient, cid: str, message: str, input_params: dict[str, Any]) -> dict[str, Any]:
    """The widget's ``apiClient.sendMessage(conversationId, message, inputParams, reset)``."""
    return await call(client, "POST", f"{CONV}/message",  # type: ignore[no-any-return]
                      {"conversationId": cid, "message": message, "reset": False, "inputParams": input_params})


def audit_panel(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """What AuditPanel renders: each row's stage and ``JSON.parse(entry.payloadJson)``."""
    assert all(isinstance(row["payloadJson"], str) for row in rows)
    return [(row["stage"], json.loads(row["payloadJson"])) for row in rows]


def verbose_text(data: dict[str, Any]) -> str:
    """The widget's extractVerboseText: ``data.verbose`` or ``data.payload.verbose``, text then message."""
    verbose = data.get("verbose") or (data.get("payload") or {}).get("verbose") or {}
    return (verbose.get("text") or verbose.get("message") or verbose.get("errorMessage") or "").strip()


async def test_the_chat_widget_and_admin_ui_work_from_their_origin(server: Server) -> None:
    cid = str(uuid.uuid4())  # the widget makes its conversation id before anything is sent
    events: list[tuple[str, dict[str, Any], float]] = []
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        # before the first message: the audit panel and the admin trace load empty
        assert await call(client, "GET", f"{CONV}/audit/{cid}") == []
        trace = await call(client, "GET", f"{CONV}/audit/{cid}/trace")
        assert trace == {"conversationId": cid, "steps": [], "stages": []}

        # EventSource (no preflight for a simple GET); the turn's events and verbose messages stream live
        async with client.stream("GET", f"{CONV}/stream/{cid}",
                                 headers={"Origin": WIDGET, "Accept": "text/event-stream"}) as stream:
            assert stream.headers["access-control-allow-origin"] == WIDGET
            reader = asyncio.create_task(read_events(stream, "ENGINE_RETURN", events))
            while not events:
                await asyncio.sleep(0.05)
            reply = await send(client, cid, "hello", {})
            await asyncio.wait_for(reader, timeout=30)
        assert (reply["success"], reply["conversationId"], reply["payload"]["value"]) == (True, cid, "Hello there")
        names = [name for name, _, _ in events]
        assert names[0] == "CONNECTED" and "ASSISTANT_OUTPUT" in names and "STEP_ENTER" in names
        verbose = [data for name, data, _ in events if name == "VERBOSE"]
        assert all(data["eventType"] == "VERBOSE" and data["stage"] == "VERBOSE" for data in verbose)
        assert all(data["payload"]["verbose"] == data["verbose"] for data in verbose)
        shown = [verbose_text(data) for data in verbose]
        assert "Agent is processing your request." in shown and "Intent resolved: GREETING" in shown
        assert [d["verbose"]["stepName"] for d in verbose if d["verbose"]["determinant"] == "STEP_EXIT"] == [
            "IntentResolutionStep"]
        assert all(data["verbose"] is None for name, data, _ in events if name not in ("VERBOSE", "CONNECTED"))

        # a silent submit: no text, the card's params drive the turn
        silent = await send(client, cid, "", {"plan": "premium"})
        assert (silent["success"], silent["state"], silent["payload"]["value"]) == (
            True, "PLAN_CHOSEN", "Plan premium chosen")

        # thumbs down on the last answer, with the widget's metadata
        saved = await call(client, "POST", f"{CONV}/feedback", {
            "conversationId": cid, "feedbackType": "THUMBS_DOWN", "messageId": "c-1732531200-3",
            "assistantResponse": "Plan premium chosen",
            "metadata": {"role": "assistant", "hasMarkdownTable": False, "comment": "wrong plan", "question": ""}})
        assert saved["success"] is True and saved["message"] == "Feedback saved."
        assert isinstance(saved["feedbackId"], int)
        stored = await call(client, "GET", f"{CONV}/feedback/{cid}")
        assert [(f["feedbackId"], f["feedbackType"], f["stateCode"], json.loads(f["metadataJson"])["comment"])
                for f in stored] == [(saved["feedbackId"], "THUMBS_DOWN", "PLAN_CHOSEN", "wrong plan")]

        # the audit panel after the turns
        panel = audit_panel(await call(client, "GET", f"{CONV}/audit/{cid}"))
        assert [payload["text"] for stage, payload in panel if stage == "USER_INPUT"] == ["hello", ""]
        feedback = [payload for stage, payload in panel if stage == "MCP_USER_FEEDBACK"]
        assert [(p["feedback_id"], p["feedback_type"], p["turn"]) for p in feedback] == [
            (saved["feedbackId"], "THUMBS_DOWN", 2)]
        assert "VERBOSE" not in [stage for stage, _ in panel]
        trace = await call(client, "GET", f"{CONV}/audit/{cid}/trace")
        assert trace["steps"][0]["stepClass"] == "LoadOrCreateConversationStep"
        assert all(isinstance(s["durationMs"], int) and s["status"] == "OK" for s in trace["steps"])

        # the admin UI's cache page
        analysis = await call(client, "GET", "/api/v1/cache/analyze?warmup=true")
        assert analysis["staticCaches"]["ce_verbose"]["listSize"] == 3
        assert analysis["staticCaches"]["ce_verbose"]["databaseRowCount"] == 3
        assert set(analysis["warmupTimingMs"]["ce_rule"]) == {"firstCallMs", "secondCallMs"}
        assert analysis["cacheProvider"]["snapshotVersion"] == analysis["snapshot"]["version"]
        assert analysis["runtimeCaches"]["ce_conversation_turn_locks"]["exists"] is True
        cold = await call(client, "GET", "/api/v1/cache/analyze?warmup=false")
        assert "warmupTimingMs" not in cold and cold["warmupAndTimingEnabled"] is False
