"""ce_audit rows are stored compactly (no copy of what the row's columns hold) yet ``/audit``, ``/trace``
and the history answer exactly what the turn emitted live."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from convengine import Engine
from convengine.api.app import create_app
from convengine.audit.trace import build_trace
from convengine.db import create_sync_engine, parse_database_url
from tests.conftest import PACKS
from tests.servers import in_process

pytestmark = pytest.mark.asyncio

MESSAGES = ("hello", "a loan please", "my password is 1234", "hello")


async def run_over_http(engine: Engine) -> tuple[str, list[Any], dict[str, Any]]:
    """The turns over HTTP, the events streamed live meanwhile, and what /audit, /trace, /history answer."""
    live = engine.subscribe()
    cid = None
    async with in_process(create_app(engine=engine)) as client:
        for message in MESSAGES:
            body: dict[str, Any] = {"message": message, **({"conversationId": cid} if cid else {})}
            reply = await client.post("/api/v1/conversation/message", json=body)
            assert reply.status_code == 200, reply.text
            cid = reply.json()["conversationId"]
        answers = {name: (await client.get(path)).json() for name, path in (
            ("audit", f"/api/v1/conversation/audit/{cid}"), ("trace", f"/api/v1/conversation/audit/{cid}/trace"))}
    events = []
    while not live.queue.empty():
        events.append(live.queue.get_nowait())
    assert cid is not None
    return cid, [e for e in events if e.conversation_id == cid], answers


def stored_payloads(url: str) -> list[dict[str, Any]]:
    db = create_sync_engine(parse_database_url(url))
    try:
        with db.connect() as conn:
            rows = conn.execute(sa.text("SELECT payload_json FROM ce_audit ORDER BY audit_id")).scalars().all()
    finally:
        db.dispose()
    return [row if isinstance(row, dict) else json.loads(row) for row in rows]


async def test_audit_and_trace_over_http_match_the_live_events(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml")
    try:
        cid, live, answers = await run_over_http(engine)
        history = await engine.ahistory(cid)
    finally:
        await engine.aclose()
    audit = answers["audit"]
    assert [row["stage"] for row in audit] == [e.stage for e in live]
    for row, event in zip(audit, live, strict=True):
        assert json.loads(row["payloadJson"]) == event.stored_payload(), event.stage
        assert datetime.fromisoformat(row["createdAt"]) == event.created_at
        assert json.loads(row["payloadJson"])["_meta"]["conversationId"] == cid
    expected = build_trace(cid, live)
    for stage, row in zip(expected["stages"], audit, strict=True):
        stage["auditId"] = row["auditId"]  # ids exist once stored
    assert [(s["stage"], s["payload"]) for s in answers["trace"]["stages"]] == \
        [(s["stage"], s["payload"]) for s in expected["stages"]]
    assert [(s["step"], s["status"]) for s in answers["trace"]["steps"]] == \
        [(s["step"], s["status"]) for s in expected["steps"]]
    assert [h["user_input"] for h in history] == list(MESSAGES)
    assert history[2]["assistant_output"]["value"] == "Please keep passwords to yourself."


async def test_rows_do_not_repeat_their_columns_in_meta(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml")
    try:
        await run_over_http(engine)
    finally:
        await engine.aclose()
    stored = stored_payloads(db_url)
    assert stored and all("_meta" in p for p in stored)
    assert not any({"stage", "conversationId", "emittedAt"} & set(p["_meta"]) for p in stored)
    assert any(p["_meta"].get("step") for p in stored)  # kept where the payload does not say it


async def test_without_persisted_meta_audit_has_none(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml", audit={"persist_meta": False})
    try:
        _, live, answers = await run_over_http(engine)
    finally:
        await engine.aclose()
    assert len(answers["audit"]) == len(live) > 0
    assert not any("_meta" in json.loads(row["payloadJson"]) for row in answers["audit"])
