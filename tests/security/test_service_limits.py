"""A pack's HTTP calls against a host that answers 503 forever: the retries and timeouts a pack sets
(a service node's ``retries`` / ``timeout_ms``, ``mcp.http-api.defaults``) are bounded, so such a
host cannot hold a turn (and its conversation) for good, nor be hammered by one turn.

Before the fix a service node with ``retries: 1000000`` kept its turn running, 2,500 requests in
15 s against the stub and counting. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from convengine.catalog.errors import ConfigError, ConfigValidationError
from convengine.settings import HTTP_MAX_ATTEMPTS
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on
from tests.http_stub import http_server

pytestmark = pytest.mark.asyncio
QUICK = {"initial-backoff-ms": 1, "max-backoff-ms": 1}


def service_flow(url: str, defaults: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    nodes = [node("SV", "start", "start"), node("SV", "call", "service", service_id="q", url=url + "/q", **config),
             node("SV", "ok", "message", text="ok"), node("SV", "broken", "message", text="Service failed."),
             node("SV", "end", "end")]
    edges = [*chain("SV", "start", "call", "ok", "end"), edge("SV", "call", "broken", outcome="error"),
             edge("SV", "broken", "end")]
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "SV", "intent_code": "GREETING", "priority": 1}])
    data["settings"]["mcp"] = {"http-api": {"allowed-hosts": ["127.0.0.1"], "defaults": {**QUICK, **(defaults or {})}}}
    return data


@pytest.mark.parametrize(("config", "says"), [
    ({"retries": 1_000_000}, "retries"), ({"retries": HTTP_MAX_ATTEMPTS}, "retries"), ({"retries": -1}, "retries"),
    ({"retries": "lots"}, "retries"), ({"timeout_ms": 10**9}, "timeout_ms"), ({"timeout_ms": 0}, "timeout_ms"),
    ({"timeout_ms": "soon"}, "timeout_ms"),
])
async def test_a_service_nodes_retries_and_timeout_past_the_bounds_are_refused_at_load(
        db_url: str, config: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, service_flow("http://127.0.0.1:9", **config)):
            pass
    message = str(caught.value)
    assert "flow SV node call" in message and says in message, message


@pytest.mark.parametrize("defaults", [{"max-attempts": 1_000_000}, {"read-timeout-ms": 10**9},
                                      {"connect-timeout-ms": 10**9}, {"max-backoff-ms": 10**9},
                                      {"backoff-multiplier": float("nan")}, {"read-timeout-ms": 0}])
async def test_the_packs_http_defaults_past_the_bounds_are_refused(db_url: str, defaults: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        async with engine_on(db_url, service_flow("http://127.0.0.1:9", defaults)):
            pass
    assert next(iter(defaults)).replace("-", "_") in str(caught.value)


async def test_a_host_answering_503_forever_gets_a_bounded_number_of_requests(db_url: str) -> None:
    with http_server(lambda path, body: (503, {"error": "busy"})) as stub:
        async with engine_on(db_url, service_flow(stub.url, retries=HTTP_MAX_ATTEMPTS - 1, timeout_ms=1000)) as engine:
            started = time.monotonic()
            result = await engine.aprocess("hello")
            assert result.text == "Service failed."
            assert time.monotonic() - started < 30
        assert len(stub.requests) == HTTP_MAX_ATTEMPTS


@pytest.mark.parametrize("top_k", [100_000_000, 21, 0, "all"])
async def test_a_knowledge_nodes_top_k_past_the_bound_is_refused_at_load(db_url: str, top_k: Any) -> None:
    # every passage of every knowledge base, kept in the session's sources variable on every turn
    nodes = [node("KN", "start", "start"), node("KN", "look", "knowledge", top_k=top_k), node("KN", "end", "end")]
    data = flows_pack(nodes=nodes, edges=chain("KN", "start", "look", "end"),
                      flows=[{"flow_code": "KN", "intent_code": "GREETING", "priority": 1}])
    with pytest.raises(ConfigValidationError) as caught:
        async with engine_on(db_url, data):
            pass
    assert "flow KN node look" in str(caught.value) and "top_k" in str(caught.value)
