"""A turn's audit is stored as one compact ``ce_audit_turn`` row (no copy of what the row says), yet
``/audit``, ``/trace`` and the history answer exactly what the turn emitted live; ``ce_audit`` rows
written before (one per event) read the same, before and among the new rows."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from convengine import Engine
from convengine.api.app import create_app
from convengine.audit.events import AuditEvent
from convengine.audit.packing import ZDICT
from convengine.audit.trace import build_trace
from convengine.audit.turns import split_turns
from convengine.db import create_sync_engine, parse_database_url, upgrade
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


def query(url: str, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    db = create_sync_engine(parse_database_url(url))
    try:
        with db.begin() as conn:
            result = conn.execute(sa.text(sql), params or {})
            return list(result.all()) if result.returns_rows else []
    finally:
        db.dispose()


def packed_rows(url: str) -> list[dict[str, Any]]:
    """Every ce_audit_turn row's value, unpacked by hand (zlib with the format's dictionary, then JSON)."""
    rows = query(url, "SELECT events FROM ce_audit_turn ORDER BY audit_turn_id")
    return [json.loads(zlib.decompressobj(zdict=ZDICT).decompress(bytes(r[0]))) for r in rows]


def write_the_old_way(url: str, events: list[AuditEvent]) -> None:
    """``events`` as ce_audit rows, the way turns were stored before ce_audit_turn (one row per event)."""
    for e in events:
        payload = json.dumps(e.row_payload(), ensure_ascii=False)
        query(url, "INSERT INTO ce_audit (conversation_id, stage, payload_json, created_at) VALUES (:c, :s, "
                   + ("CAST(:p AS jsonb), :t)" if url.startswith("postgresql") else ":p, :t)"),
              {"c": e.conversation_id, "s": e.stage, "p": payload,
               "t": e.created_at if url.startswith("postgresql")
               else e.created_at.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")})


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


async def test_a_turn_is_one_row_that_does_not_repeat_what_the_row_says(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml")
    try:
        _, live, _ = await run_over_http(engine)
    finally:
        await engine.aclose()
    assert query(db_url, "SELECT count(*) FROM ce_audit")[0][0] == 0
    packed = packed_rows(db_url)
    assert len(packed) == len(MESSAGES) == len(split_turns(live))
    metas = [item[3] for row in packed for item in row["e"]]
    assert len(metas) == len(live) and all(isinstance(m, dict) for m in metas)
    assert not any({"stage", "conversationId", "emittedAt", "turnId"} & set(m) for m in metas)
    assert any(m.get("step") for m in metas)  # kept: the row does not say it
    assert [row["t"] for row in packed] == [turn[0].turn_id for turn in split_turns(live)]


async def test_rows_written_the_old_way_read_as_before_and_before_the_new_ones(db_url: str) -> None:
    """A conversation whose first turns are ce_audit rows (stored by an older version) and whose later
    turns are packed answers /audit and /trace exactly as if every turn had been stored one way."""
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml")
    try:
        cid, live, answers = await run_over_http(engine)
        old = split_turns(live)[:2]
        first_rows = query(db_url, "SELECT audit_turn_id FROM ce_audit_turn ORDER BY audit_turn_id")[:2]
        query(db_url, "DELETE FROM ce_audit_turn WHERE audit_turn_id IN (:a, :b)",
              {"a": first_rows[0][0], "b": first_rows[1][0]})
        write_the_old_way(db_url, [e for turn in old for e in turn])
        async with in_process(create_app(engine=engine)) as client:
            audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
            trace = (await client.get(f"/api/v1/conversation/audit/{cid}/trace")).json()
        events = await engine.aaudit(cid)
    finally:
        await engine.aclose()
    legacy = sum(len(turn) for turn in old)
    assert query(db_url, "SELECT count(*) FROM ce_audit")[0][0] == legacy > 0
    ids = [row["auditId"] for row in audit]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    assert [_parsed(row) for row in audit] == [_parsed(row) for row in answers["audit"]]
    assert [json.loads(row["payloadJson"]) for row in audit] == [e.stored_payload() for e in live]
    assert [(e.stage, e.payload, e.meta, e.created_at, e.step, e.turn_id) for e in events] == \
        [(e.stage, e.payload, e.meta, e.created_at, e.step, e.turn_id) for e in live]
    assert [(s["stage"], s["payload"], s["createdAt"]) for s in trace["stages"]] == \
        [(s["stage"], s["payload"], s["createdAt"]) for s in answers["trace"]["stages"]]
    assert [{k: v for k, v in s.items() if k != "stages"} for s in trace["steps"]] == \
        [{k: v for k, v in s.items() if k != "stages"} for s in answers["trace"]["steps"]]


def _parsed(row: dict[str, Any]) -> dict[str, Any]:
    """An /audit row without its id, ``payloadJson`` parsed (PostgreSQL's jsonb orders an old row's keys its way)."""
    return {**{k: v for k, v in row.items() if k != "auditId"}, "payloadJson": json.loads(row["payloadJson"])}


async def test_an_upgraded_database_numbers_new_events_after_its_old_rows(empty_db_url: str) -> None:
    """Migration 0011 starts the packed rows' ids past the highest ce_audit id: auditIds stay unique and
    keep growing across the upgrade."""
    url = parse_database_url(empty_db_url)
    upgrade(url, "0010")
    cid = "5b0d2c1e-2f43-4c9b-9d51-6f7c2a1e0b11"
    query(empty_db_url, "INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, context_json, "
                        "input_params_json) VALUES (:c, 'RUNNING', 'GREETING', 'IDLE', '{}', '{}')", {"c": cid})
    old = AuditEvent(cid, "USER_INPUT", {"text": "hi"}, datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), None,
                     {"stage": "USER_INPUT", "conversationId": cid, "emittedAt": "2026-01-02T03:04:05.678901+00:00",
                      "intent": None, "state": None, "step": None, "turnId": "t-1"}, turn_id="t-1")
    write_the_old_way(empty_db_url, [old])
    query(empty_db_url, "UPDATE ce_audit SET audit_id = 123456")
    upgrade(url)
    engine = await Engine.aopen(empty_db_url, pack=PACKS / "api_pack.yaml")
    try:
        await engine.aprocess("hello", cid)
        events = await engine.aaudit(cid)
    finally:
        await engine.aclose()
    assert events[0] == AuditEvent(cid, "USER_INPUT", {"text": "hi"}, old.created_at, None, old.meta, 123456, "t-1")
    assert len(events) > 1 and all(e.audit_id is not None and e.audit_id > 123456 for e in events[1:])
    assert [e.audit_id for e in events] == sorted(e.audit_id for e in events if e.audit_id is not None)


async def test_without_persisted_meta_audit_has_none(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml", audit={"persist_meta": False})
    try:
        _, live, answers = await run_over_http(engine)
    finally:
        await engine.aclose()
    assert len(answers["audit"]) == len(live) > 0
    assert not any("_meta" in json.loads(row["payloadJson"]) for row in answers["audit"])
