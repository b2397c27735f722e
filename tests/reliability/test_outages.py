"""Outages of what a turn depends on: the model and the tools. Errors are clear, conversations intact."""

from __future__ import annotations

import time
from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, LlmError
from convengine.llm import ScriptedLLM
from convengine.tools.http import HttpRequest
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.http_stub import http_server
from tests.openai_stub import stub_server
from tests.scenarios.test_openai_compatible import chat_model, derived_pack, reply_for
from tests.scenarios.test_tools import plan, planner_pack
from tests.servers import free_port

pytestmark = pytest.mark.asyncio

HTTP_TOOL = {"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "LOAN",
             "state_code": "ANY", "description": "Look up the customer"}
FAST_HTTP = {"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"], "defaults": {
    "connect-timeout-ms": 300, "read-timeout-ms": 300, "max-attempts": 2, "initial-backoff-ms": 10}}}}


async def test_an_llm_outage_fails_turns_recoverably_until_the_model_is_back(db_url: str) -> None:
    data = derived_pack()
    data["settings"]["llm"] = {"max-retries": 1}
    with stub_server(reply_for) as server:
        async with engine_on(db_url, data, llm=chat_model(server.base_url)) as engine:
            first = await engine.aprocess("hello")
            before = await engine.astate(first.conversation_id)
            server.outage = True
            for _ in range(2):
                with pytest.raises(LlmError) as info:
                    await engine.aprocess("a loan please", first.conversation_id)
                assert info.value.code is ErrorCode.LLM_CALL_FAILED and info.value.recoverable
                assert "overloaded" in info.value.message
            after = await engine.astate(first.conversation_id)
            assert {k: after[k] for k in ("turn", "intent", "state", "context")} == \
                   {k: before[k] for k in ("turn", "intent", "state", "context")}
            assert len(await engine.ahistory(first.conversation_id)) == 1

            server.outage = False
            result = await engine.aprocess("a loan please", first.conversation_id)
            assert (result.turn, result.intent, result.state) == (2, "LOAN", "START")
            assert result.payload.value.startswith("Happy to help")


def http_lookup(url: str) -> Any:
    def lookup(args: dict[str, Any]) -> HttpRequest:
        return HttpRequest(url=f"{url}/customers/{args['id']}")
    return lookup


async def _direct_call(engine: Any, cid: str) -> dict[str, Any]:
    result = await engine.aprocess("look it up", cid, input_params={"tool_request": {
        "tool_code": "crm.lookup", "args": {"id": "c1"}}})
    assert (result.intent, result.state) == ("LOAN", "START")  # the turn completed where it was
    return payload_of(await turn_events(engine, cid), "TOOL_ORCHESTRATION_ERROR")


async def test_an_http_tool_whose_server_is_down_reports_an_error_shape(db_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    data = pack(ce_mcp_tool=[HTTP_TOOL], settings=FAST_HTTP)
    async with engine_on(db_url, data, tools={"crm.lookup": http_lookup(dead)}) as engine:
        first = await engine.aprocess("loan")
        shaped = await _direct_call(engine, first.conversation_id)
        assert shaped["status"] == "ERROR" and shaped["tool_code"] == "crm.lookup"
        assert "after 2 attempts" in shaped["error"] and "ConnectError" in shaped["error"]
        assert (await engine.astate(first.conversation_id))["turn"] == 2


async def test_an_http_tool_that_hangs_times_out_within_its_limit(db_url: str) -> None:
    def slow(path: str, body: Any) -> tuple[int, Any]:
        time.sleep(2.0)
        return 200, {"name": "too late"}

    data = pack(ce_mcp_tool=[HTTP_TOOL], settings=FAST_HTTP)
    with http_server(slow) as server:
        async with engine_on(db_url, data, tools={"crm.lookup": http_lookup(server.url)}) as engine:
            first = await engine.aprocess("loan")
            shaped = await _direct_call(engine, first.conversation_id)
            assert shaped["status"] == "ERROR" and "ReadTimeout" in shaped["error"]
            assert len(server.requests) == 2  # max-attempts, then it gave up


async def test_the_planner_answers_safely_when_its_tool_is_down(db_url: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    llm = ScriptedLLM({"MCP_PLANNER": plan({"tool_code": "crm.lookup", "args": {"id": "c1"}})},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    data = planner_pack(settings=FAST_HTTP)
    async with engine_on(db_url, data, llm=llm, tools={"crm.lookup": http_lookup(dead)}) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("check my loan", first.conversation_id)
        assert result.payload.value == "Tool execution failed"
        assert result.context["mcp"]["lifecycle"]["status"] == "TOOL_ERROR"
        events = await turn_events(engine, first.conversation_id)
        assert "ConnectError" in payload_of(events, "MCP_TOOL_ERROR")["error"]
        assert llm.count("MCP_PLANNER") == 1
