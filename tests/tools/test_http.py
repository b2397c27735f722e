"""HTTP_API execution: retries, the circuit breaker, auth, response mapping, private addresses."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from convengine.errors import ErrorCode, ToolError
from convengine.settings import HttpApiDefaults, HttpApiSettings
from convengine.tools.http import HttpAuth, HttpMapping, HttpRequest, HttpRunner, check_destination
from tests.http_stub import http_server

pytestmark = pytest.mark.asyncio

LOCAL = HttpApiSettings(allowed_hosts=["127.0.0.1"],
                        defaults=HttpApiDefaults(max_attempts=3, initial_backoff_ms=10, max_backoff_ms=40,
                                                 circuit_failure_threshold=2, circuit_open_ms=60_000))


async def test_a_server_that_fails_twice_then_succeeds_is_retried() -> None:
    counter = itertools.count(1)

    def reply(path: str, body: Any) -> tuple[int, Any]:
        n = next(counter)
        return (503, {"error": "busy"}) if n <= 2 else (200, {"ok": True, "n": n})

    with http_server(reply) as server:
        runner = HttpRunner()
        result = await runner.execute("flaky.api", HttpRequest(url=server.url + "/x"), LOCAL)
        await runner.aclose()
    assert result["status"] == 200 and result["attempt"] == 3 and result["mapped"] == {"ok": True, "n": 3}
    assert len(server.requests) == 3


async def test_a_server_that_always_fails_opens_the_circuit() -> None:
    with http_server(lambda path, body: (502, {"error": "down"})) as server:
        runner = HttpRunner()
        for _ in range(2):
            with pytest.raises(ToolError, match="HTTP 502"):
                await runner.execute("dead.api", HttpRequest(url=server.url), LOCAL)
        calls_before = len(server.requests)
        with pytest.raises(ToolError) as info:
            await runner.execute("dead.api", HttpRequest(url=server.url), LOCAL)
        assert info.value.code == ErrorCode.CIRCUIT_OPEN and "Circuit open for tool dead.api" in info.value.message
        assert len(server.requests) == calls_before  # an open circuit makes no request
        await runner.aclose()
    assert calls_before == 6  # two calls, three attempts each


async def test_io_errors_are_retried_then_reported() -> None:
    runner = HttpRunner()
    with pytest.raises(ToolError, match="ConnectError"):
        await runner.execute("nowhere", HttpRequest(url="http://127.0.0.1:9/"), LOCAL)
    await runner.aclose()


async def test_auth_headers_query_body_and_mappings() -> None:
    with http_server(lambda path, body: (200, {"data": {"items": [{"id": 1}, {"id": 2}], "total": 2}})) as server:
        runner = HttpRunner()
        spec = HttpRequest(url=server.url + "/search", method="POST", query={"q": "a b"}, body={"x": 1},
                           auth=HttpAuth(type="BEARER", value="tok"), mapping=HttpMapping(mode="JSON_PATH",
                                                                                           path="$.data.total"))
        assert (await runner.execute("t1", spec, LOCAL))["mapped"] == 2
        spec = HttpRequest(url=server.url, auth=HttpAuth(type="API_KEY", value="k1"),
                           mapping=HttpMapping(mode="FIELD_TEMPLATE", fields={"first": "$.data.items[0].id",
                                                                              "ids": "$.data.items[*].id"}))
        assert (await runner.execute("t2", spec, LOCAL))["mapped"] == {"first": 1, "ids": [1, 2]}
        spec = HttpRequest(url=server.url, mapping=HttpMapping(mode="TEXT"))
        assert '"total": 2' in (await runner.execute("t3", spec, LOCAL))["mapped"]
        await runner.aclose()
    first, second = server.requests[0], server.requests[1]
    assert first["path"] == "/search?q=a+b" and first["body"] == {"x": 1}
    assert first["headers"]["Authorization"] == "Bearer tok"
    assert second["headers"]["X-API-KEY"] == "k1" and second["method"] == "GET"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/x", "http://localhost/x", "http://10.1.2.3/", "http://192.168.0.1",
                                 "http://169.254.169.254/latest/meta-data", "http://[::1]/", "http://0.0.0.0/",
                                 "http://[::ffff:127.0.0.1]/"])
async def test_private_loopback_and_link_local_addresses_are_refused(url: str) -> None:
    with pytest.raises(ToolError) as info:
        await check_destination(url, [])
    assert info.value.code == ErrorCode.URL_NOT_ALLOWED and "private, loopback or link-local" in info.value.message


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "http:///nohost"])
async def test_only_http_urls_with_a_host(url: str) -> None:
    with pytest.raises(ToolError, match="only http"):
        await check_destination(url, [])


async def test_allow_lists_by_host_and_cidr() -> None:
    await check_destination("http://localhost:8080/", ["localhost"])
    await check_destination("http://10.1.2.3/", ["10.0.0.0/8"])
    with pytest.raises(ToolError):
        await check_destination("http://10.1.2.3/", ["192.168.0.0/16"])
