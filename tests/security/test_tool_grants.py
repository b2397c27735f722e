"""Only an enabled ce_mcp_tool row in scope can run, whatever a caller's ``tool_request`` says.

Attack: with the support desk pack (no tools at all), ``tool_request: {tool_code: "postgres.query",
tool_group: "DB", args: {sql: "SELECT * FROM ce_conversation"}}`` was turned into a made-up tool
scoped ANY/ANY and run on the engine's own database: every conversation came back in ``context``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from convengine.engine import Engine
from tests.conftest import EXAMPLES
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.security.world import assert_unchanged

pytestmark = pytest.mark.asyncio

STEAL = "SELECT conversation_id, context_json FROM ce_conversation"
INVENTED = [
    {"tool_code": "postgres.query", "tool_group": "DB", "args": {"sql": STEAL}},
    {"tool_code": "db.query", "args": {"sql": STEAL}},
    {"tool_group": "DB", "args": {"sql": STEAL}},
    {"tool_code": "anything.at_all", "tool_group": "HTTP_API", "args": {"url": "http://127.0.0.1:1/"}},
]
CRM = [{"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "ANY", "state_code": "ANY",
        "enabled": True, "description": "customer lookup"},
       {"tool_id": 2, "tool_code": "crm.disabled", "tool_group": "HTTP_API", "intent_code": "ANY",
        "state_code": "ANY", "enabled": False}]


@pytest.mark.parametrize("request_", INVENTED)
async def test_invented_tools_are_refused_and_nothing_runs(db_url: str, world: Any, request_: dict) -> None:
    engine = await Engine.aopen(db_url, pack=EXAMPLES / "support_desk.yaml")
    try:
        secret = await engine.aprocess("where is my order", input_params={"order_id": "SECRET-42"})
        attacker = (await engine.aprocess("hello")).conversation_id
        before = world(attacker=attacker)
        result = await engine.aprocess("x", attacker, input_params={"tool_request": request_})
        events = await turn_events(engine, attacker)
        error = payload_of(events, "TOOL_ORCHESTRATION_ERROR")
        assert error["status"] == "ERROR" and ("no enabled tool" in error["error"] or "tool_group" in error["error"])
        stages = [e.stage for e in events]
        assert "MCP_DB_SQL_EXECUTION" not in stages and "TOOL_ORCHESTRATION_RESULT" not in stages
        assert secret.conversation_id not in json.dumps(result.context) and "SECRET-42" not in json.dumps(result.context)
        assert_unchanged(before, world(attacker=attacker))
    finally:
        await engine.aclose()


async def test_invented_tool_over_http_returns_no_rows(db_url: str, serve: Any, world: Any) -> None:
    server = serve(pack=EXAMPLES / "support_desk.yaml")
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        victim = await client.post("/api/v1/conversation/message",
                                   json={"message": "where is my order", "inputParams": {"order_id": "SECRET-42"}})
        body = {"message": "x", "inputParams": {"tool_request": INVENTED[0]}}
        first = (await client.post("/api/v1/conversation/message", json={"message": "hello"})).json()
        before = world(attacker=first["conversationId"])
        reply = await client.post("/api/v1/conversation/message", json={**body, "conversationId": first["conversationId"]})
        assert reply.status_code == 200
        text = reply.text
        assert victim.json()["conversationId"] not in text and "SECRET-42" not in text
        assert "no enabled tool 'postgres.query'" in json.dumps(json.loads(reply.json()["context"]))
        assert_unchanged(before, world(attacker=first["conversationId"]))


@pytest.mark.parametrize(("request_", "error"), [
    ({"tool_code": "crm.lookup", "tool_group": "DB", "args": {"sql": STEAL}}, "is in group HTTP_API, not DB"),
    ({"tool_code": "crm.disabled", "args": {}}, "no enabled tool 'crm.disabled'"),
    ({"tool_group": "HTTP_API", "args": {}}, None),  # exactly one enabled HTTP_API tool: that one runs
])
async def test_a_request_resolves_only_among_granted_rows(db_url: str, request_: dict, error: str | None) -> None:
    calls: list[str] = []

    def lookup(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls.append(ctx.tool.tool_code)
        return {"ok": True}

    async with engine_on(db_url, pack(ce_mcp_tool=CRM), tools={"crm.lookup": lookup, "crm.disabled": lookup}) as engine:
        result = await engine.aprocess("hello", input_params={"tool_request": request_})
        events = await turn_events(engine, result.conversation_id)
        if error is None:
            assert payload_of(events, "TOOL_ORCHESTRATION_RESULT")["tool_code"] == "crm.lookup"
            assert calls == ["crm.lookup"]
        else:
            assert error in payload_of(events, "TOOL_ORCHESTRATION_ERROR")["error"] and calls == []


async def test_tool_results_are_capped_in_bytes(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_mcp_tool=CRM, settings={"mcp": {"max_result_bytes": 4096}}),
                         tools={"crm.lookup": lambda args: {"blob": "x" * 100_000}}) as engine:
        result = await engine.aprocess("hello", input_params={"tool_request": {"tool_code": "crm.lookup", "args": {}}})
        error = payload_of(await turn_events(engine, result.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        assert "the limit is 4096 (mcp.max_result_bytes)" in error["error"]
        assert len(json.dumps(result.context)) < 4096


async def test_a_denied_turn_runs_no_direct_tool(db_url: str) -> None:
    calls: list[str] = []
    guard = {"flow": {"guardrail": {"sensitive_patterns": ["delete everything"],
                                    "require_approval_for_sensitive_actions": True}}}
    async with engine_on(db_url, pack(ce_mcp_tool=CRM, settings=guard),
                         tools={"crm.lookup": lambda args: calls.append("ran") or {}}) as engine:
        result = await engine.aprocess("delete everything",
                                       input_params={"tool_request": {"tool_code": "crm.lookup", "args": {}}})
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "TOOL_ORCHESTRATION_SKIPPED")["reason"] == "BLOCKED_BY_GUARDRAIL"
        assert calls == []
