"""HTTP_API execution: retries, the circuit breaker, auth, response mapping, private addresses, pinned
connections (Host header, TLS SNI and verification by host name), header hygiene."""

from __future__ import annotations

import datetime
import itertools
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from convengine.catalog.errors import ErrorCode, ToolError
from convengine.settings import HttpApiDefaults, HttpApiSettings
from convengine.tools.http import (
    HttpAuth,
    HttpMapping,
    HttpRequest,
    HttpRunner,
    check_destination,
    pinned_client,
)
from tests.http_stub import HttpStub, http_server

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


# --- pinned connections: the address checked is the address connected to ------------------


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Resolve the names in ``answers`` to their addresses in turn (the last one repeats); others as usual."""
    real = socket.getaddrinfo
    asked: list[tuple[str, str]] = []

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, *args, **kwargs)
        served = [a for h, a in asked if h == name]
        address = answers[name][min(len(served), len(answers[name]) - 1)]
        asked.append((name, address))
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return asked


CIDR_LOCAL = HttpApiSettings(allowed_hosts=["127.0.0.0/8"], defaults=HttpApiDefaults(max_attempts=1))


async def test_a_pinned_connection_keeps_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = fake_dns(monkeypatch, {"api.example.test": ["127.0.0.1"]})
    with http_server(lambda path, body: (200, {"ok": True})) as server:
        port = server.server.server_address[1]
        runner = HttpRunner()
        spec = HttpRequest(url=f"http://api.example.test:{port}/x")
        result = await runner.execute("named.api", spec, CIDR_LOCAL)
        await runner.aclose()
    assert result["mapped"] == {"ok": True}
    assert server.requests[0]["headers"]["Host"] == f"api.example.test:{port}"
    assert [address for _, address in asked] == ["127.0.0.1", "127.0.0.1"]  # the check, then the connection


def _self_signed(hostname: str, folder: Path) -> tuple[Path, Path, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(pem)
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "cert.pem", folder / "key.pem", pem.decode()


async def test_tls_over_a_pinned_address_sends_sni_and_verifies_the_host_name(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    fake_dns(monkeypatch, {"api.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]})
    cert, key, pem = _self_signed("api.example.test", tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_tls.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment]
    stub = HttpStub(lambda path, body: (200, {"tls": True}))
    stub.server.socket = server_tls.wrap_socket(stub.server.socket, server_side=True)
    stub.thread.start()
    port = stub.server.server_address[1]
    runner = HttpRunner(pinned_client(verify=ssl.create_default_context(cadata=pem)))
    try:
        ok = await runner.execute("tls.api", HttpRequest(url=f"https://api.example.test:{port}/x"),
                                  CIDR_LOCAL)
        with pytest.raises(ToolError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed|match"):
            await runner.execute("tls.other", HttpRequest(url=f"https://other.example.test:{port}/x"),
                                 CIDR_LOCAL)
    finally:
        await runner.aclose()
        stub.server.shutdown()
        stub.server.server_close()
    assert ok["mapped"] == {"tls": True} and names[:2] == ["api.example.test", "other.example.test"]
    assert stub.requests[0]["headers"]["Host"] == f"api.example.test:{port}"


async def test_a_header_with_a_line_break_is_refused_by_name_never_by_value() -> None:
    with http_server(lambda path, body: (200, {})) as server:
        runner = HttpRunner()
        for spec in (HttpRequest(url=server.url, auth=HttpAuth(type="BEARER", value="tok-4f9a2c81\n")),
                     HttpRequest(url=server.url, headers={"X-Trace": "a\r\nX-Injected: 1"})):
            with pytest.raises(ToolError) as info:
                await runner.execute("t", spec, LOCAL)
            assert "tok-4f9a2c81" not in str(info.value) and "X-Injected" not in str(info.value)
            assert "is not a valid header value" in info.value.message
        await runner.aclose()
    assert "ends with a line break" in info.value.message or "control character" in info.value.message
    assert server.requests == []


async def test_environment_proxies_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with http_server(lambda path, body: (200, {"direct": True})) as server:
        runner = HttpRunner()
        result = await runner.execute("direct.api", HttpRequest(url=server.url), LOCAL)
        await runner.aclose()
    assert result["mapped"] == {"direct": True}
