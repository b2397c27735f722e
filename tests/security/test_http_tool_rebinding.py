"""DNS rebinding past the HTTP tool's address check (security issue item 9).

The attacker controls a name's DNS: it answers a public address when the tool checks the URL and
127.0.0.1 when the tool connects, hoping to reach a service that only listens on loopback. The
connection must go to the address that was checked, so the internal server receives nothing and
the tool call is refused with URL_NOT_ALLOWED naming the address.
"""

from __future__ import annotations

from typing import Any

import pytest

from convengine.tools.http import HttpRequest
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.http_stub import http_server
from tests.security.world import assert_unchanged
from tests.tools.test_http import fake_dns

pytestmark = pytest.mark.asyncio

PUBLIC = "93.184.216.34"
TOOL = {"tool_id": 1, "tool_code": "weather.api", "tool_group": "HTTP_API", "intent_code": "LOAN",
        "state_code": "ANY", "description": "Weather forecast from a public API"}


def tool_request() -> dict[str, Any]:
    return {"tool_request": {"tool_code": "weather.api", "args": {}}}


async def test_a_name_that_rebinds_to_loopback_reaches_nothing(db_url: str, world: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with http_server(lambda path, body: (200, {"internal": "admin data"})) as internal:
        port = internal.server.server_address[1]
        asked = fake_dns(monkeypatch, {"rebind.example": [PUBLIC, "127.0.0.1"]})
        tools = {"weather.api": lambda args, ctx: HttpRequest(url=f"http://rebind.example:{port}/admin")}
        async with engine_on(db_url, pack(ce_mcp_tool=[TOOL]), tools=tools) as engine:
            first = await engine.aprocess("loan")
            before = world(first.conversation_id)
            result = await engine.aprocess("forecast please", first.conversation_id,
                                           input_params=tool_request())
            shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        after = world(first.conversation_id)
    assert internal.requests == []
    assert [address for _, address in asked] == [PUBLIC, "127.0.0.1"]  # checked once early, once to connect
    assert shaped["status"] == "ERROR" and "rebind.example resolves to 127.0.0.1" in shaped["error"]
    assert "private, loopback or link-local" in shaped["error"] and "admin data" not in str(result.context)
    assert result.context["mcp"]["toolExecution"]["errorMessage"] == shaped["error"]
    assert_unchanged(before, after)


async def test_an_allowed_name_connects_to_the_address_it_resolved(db_url: str, world: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned connection is the normal path, not only a refusal: an allowed name works as before."""
    with http_server(lambda path, body: (200, {"forecast": "sunny"})) as service:
        port = service.server.server_address[1]
        fake_dns(monkeypatch, {"weather.internal": ["127.0.0.1"]})
        tools = {"weather.api": lambda args, ctx: HttpRequest(url=f"http://weather.internal:{port}/today")}
        data = pack(ce_mcp_tool=[TOOL], settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.0/8"]}}})
        async with engine_on(db_url, data, tools=tools) as engine:
            first = await engine.aprocess("loan")
            before = world(first.conversation_id)
            await engine.aprocess("forecast please", first.conversation_id, input_params=tool_request())
            shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        after = world(first.conversation_id)
    assert shaped["status"] == "SUCCESS" and shaped["result"]["mapped"] == {"forecast": "sunny"}
    assert service.requests[0]["headers"]["Host"] == f"weather.internal:{port}"
    assert_unchanged(before, after)
