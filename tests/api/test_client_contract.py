"""The contract items ConvEngine's front-ends depend on, each on both backends: silent submits,
the trace's ConvEngine types, and the cache report (Python API; HTTP where the route decides)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError, InvalidInputError
from convengine.db import create_sync_engine, parse_database_url
from convengine.nodes.common import Step
from tests.conftest import PACKS
from tests.helpers import engine_on, pack
from tests.servers import Server

pytestmark = pytest.mark.asyncio

SILENT_RULES = [{"rule_id": 41, "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
                 "match_pattern": "$[?(@.inputParams.plan == 'premium')]", "action": "SET_STATE",
                 "action_value": "PLAN_CHOSEN"}]
SILENT_RESPONSES = [{"state_code": "PLAN_CHOSEN", "exact_text": "Plan {{inputParams.plan}} chosen"}]


async def test_a_silent_submit_is_a_turn_driven_by_its_params(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_rule=SILENT_RULES, ce_response=SILENT_RESPONSES)) as engine:
        first = await engine.aprocess("hello")
        silent = await engine.aprocess("", first.conversation_id, input_params={"plan": "premium"})
        assert (silent.state, silent.text, silent.turn) == ("PLAN_CHOSEN", "Plan premium chosen", 2)
        blank = await engine.aprocess("  \n", first.conversation_id)
        history = await engine.ahistory(first.conversation_id)
        assert [row["user_input"] for row in history] == ["hello", "", "  \n"]  # kept as sent, like ConvEngine
        assert blank.turn == 3
        with pytest.raises(InvalidInputError, match="message must be text"):
            await engine.aprocess(None, first.conversation_id)  # type: ignore[arg-type]


async def test_policies_and_classifiers_see_the_empty_text(db_url: str) -> None:
    silent_policy = [{"rule_type": "REGEX", "pattern": "^$", "response_text": "Say something, please."}]
    async with engine_on(db_url, pack(ce_policy=silent_policy)) as engine:
        blocked = await engine.aprocess("")
        assert blocked.text == "Say something, please."
        assert (await engine.aprocess("hello", blocked.conversation_id)).intent == "GREETING"
    classifier = [{"intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX", "pattern": "^$",
                   "priority": 0}]
    async with engine_on(db_url, pack(ce_intent_classifier=classifier)) as engine:
        assert (await engine.aprocess("")).intent == "LOAN"


async def test_http_accepts_empty_null_and_missing_messages_as_convengine(db_url: str, tmp_path: Path) -> None:
    server = Server(db_url, tmp_path / "server.log", pack=PACKS / "clients_pack.yaml")
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            cid = str(uuid.uuid4())
            for body in ({"message": ""}, {"message": None}, {}):
                reply = await client.post("/api/v1/conversation/message",
                                          json={**body, "conversationId": cid, "inputParams": {"plan": "premium"}})
                assert reply.status_code == 200 and reply.json()["payload"]["value"] == "Plan premium chosen"
            audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
        texts = [json.loads(row["payloadJson"])["text"] for row in audit if row["stage"] == "USER_INPUT"]
        assert texts == ["", "", ""]
    finally:
        server.stop()


async def test_the_trace_uses_convengine_types_and_unknown_ids_still_raise_in_python(db_url: str) -> None:
    def explode(turn: Any) -> None:
        if turn.user_text == "explode":
            raise RuntimeError("boom")

    async with engine_on(db_url, pack(), steps=[Step("explode", explode, after="rules")]) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        with pytest.raises(Exception, match="boom"):
            await engine.aprocess("explode", cid)
        trace = await engine.atrace(cid)
        failed = [s for s in trace["steps"] if s["status"] == "ERROR"]
        assert [(s["step"], s["error"]) for s in failed] == [("explode", "boom")]
        assert all(isinstance(s["durationMs"], int) for s in trace["steps"] if s["endedAt"])
        assert all("_meta" in stage["payload"] for stage in trace["stages"] if stage["stage"] == "STEP_ENTER")
        with pytest.raises(ConversationNotFoundError):
            await engine.atrace(str(uuid.uuid4()))


async def test_the_cache_report_compares_the_snapshot_with_the_database(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        await engine.aprocess("hello")
        subscription = engine.subscribe()
        report = await engine.acache_report(warmup=True)
        intents = report["staticCaches"]["ce_intent"]
        assert (intents["listSize"], intents["databaseRowCount"], intents["inSync"]) == (2, 2, True)
        assert report["runtimeCaches"]["ce_audit_stream_subscriptions"]["nativeEntryCount"] == 1
        assert report["cacheProvider"]["snapshotVersion"] == engine.snapshot.version
        sync = create_sync_engine(parse_database_url(db_url))
        with sync.begin() as conn:  # a row edited by hand, not yet refreshed
            conn.execute(sa.text("INSERT INTO ce_intent (intent_code, description, priority, enabled) "
                                 "VALUES ('REFUND', 'refunds', 3, :on)"), {"on": True})
        sync.dispose()
        stale = (await engine.acache_report(warmup=True))["staticCaches"]["ce_intent"]
        assert (stale["listSize"], stale["databaseRowCount"], stale["inSync"]) == (2, 3, False)
        await engine.areload()
        cold = await engine.acache_report(warmup=False)
        assert "warmupTimingMs" not in cold and cold["staticCaches"]["ce_intent"]["listSize"] == 3
        engine.bus.unsubscribe(subscription)
