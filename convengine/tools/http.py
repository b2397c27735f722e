"""HTTP_API tools: request specs executed with httpx, with the safety ConvEngine's client had.

Timeouts, retries with exponential backoff on 429/502/503/504 and I/O errors, a per-tool circuit
breaker, auth NONE / API_KEY / BEARER, response mapping RAW_JSON / JSON_PATH / FIELD_TEMPLATE /
TEXT, and no requests to loopback, private, link-local or reserved addresses unless the host is
allow-listed (``mcp.http_api.allowed_hosts``: names or CIDR ranges). Redirects are not followed.

The address check cannot be raced by DNS: the client's network backend (:class:`PinnedBackend`)
resolves the host itself when it opens a connection, checks every address and connects to a
checked one, so a resolver that answers a public address to the check and a private one to the
connection (DNS rebinding) reaches nothing. The Host header, TLS SNI and certificate verification
still use the URL's host name. Environment proxies are not used (a proxy would resolve names itself).
Auth values and sensitive headers are remembered as secrets and never appear in error messages; a
header value with a line break or control character is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from convengine._internal import numbers
from convengine.catalog.errors import ErrorCode, ToolError
from convengine.rules.jsonpath import compile_jsonpath
from convengine.security.redact import (
    SENSITIVE_NAME,
    redact_text,
    remember_secret,
    remember_url_password,
    scrub_chain,
)
from convengine.settings import HttpApiDefaults, HttpApiSettings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_ALLOWED_HOSTS: ContextVar[tuple[str, ...]] = ContextVar("convengine_http_allowed_hosts", default=())
"""``mcp.http_api.allowed_hosts`` of the request being sent (read by :class:`PinnedBackend`)."""
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The most of a response body an HTTP tool reads (decoded); the mapped result is then capped at
``mcp.max_result_bytes``."""
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
"""Headers describing the body as sent, not as read (decoded) and kept."""


class UrlNotAllowedError(ToolError):
    default_code = ErrorCode.URL_NOT_ALLOWED

    def __init__(self, message: str, *, code: ErrorCode | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, recoverable=False, details=details)


class CircuitOpenError(ToolError):
    default_code = ErrorCode.CIRCUIT_OPEN


@dataclass(frozen=True, slots=True)
class HttpAuth:
    """``type``: NONE, API_KEY (``header`` default X-API-KEY) or BEARER (``prefix`` default Bearer)."""

    type: str = "NONE"
    value: str | None = None
    header: str = "X-API-KEY"
    prefix: str = "Bearer"


@dataclass(frozen=True, slots=True)
class HttpMapping:
    """``mode``: RAW_JSON, JSON_PATH (``path``), FIELD_TEMPLATE (``fields``: key -> JSONPath) or TEXT."""

    mode: str = "RAW_JSON"
    path: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """What an HTTP_API handler returns for the engine to execute (ConvEngine's request spec)."""

    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    auth: HttpAuth = field(default_factory=HttpAuth)
    mapping: HttpMapping = field(default_factory=HttpMapping)
    policy: HttpApiDefaults | None = None


@dataclass
class Breaker:
    failures: int = 0
    open_until: float = 0.0


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses it checked.

    ``connect_tcp`` resolves the host once (bounded by the connect timeout), refuses the connection
    when any address is loopback, private, link-local or reserved and not allow-listed, and then
    connects to the checked addresses themselves; httpcore still starts TLS with the host name.
    """

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        allowed = list(_ALLOWED_HOSTS.get())
        if _host_allowed(host.lower(), allowed):
            return await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        failure: httpcore.ConnectError | None = None
        for address in await _checked_addresses(host, port, allowed, timeout):
            try:
                return await self.inner.connect_tcp(str(address), port, timeout, local_address,
                                                    socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no address")

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise UrlNotAllowedError("HTTP tools connect over TCP only, not to a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool whose network backend is :class:`PinnedBackend`."""

    def __init__(self, verify: ssl.SSLContext | bool = True) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False), max_connections=100,
            max_keepalive_connections=20, keepalive_expiry=5.0, network_backend=PinnedBackend())


def pinned_client(verify: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """The HTTP tools' client: pinned connections, no redirects, no environment proxies."""
    return httpx.AsyncClient(transport=PinnedTransport(verify), follow_redirects=False, trust_env=False)


class HttpRunner:
    """Executes :class:`HttpRequest` specs (one shared httpx client, one breaker per tool code)."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self.client = client or pinned_client()
        self.breakers: dict[str, Breaker] = {}

    async def aclose(self) -> None:
        await self.client.aclose()

    async def execute(self, tool_code: str, spec: HttpRequest, settings: HttpApiSettings) -> dict[str, Any]:
        policy = spec.policy or settings.defaults
        headers = request_headers(spec, tool_code)
        await check_destination(spec.url, settings.allowed_hosts)
        breaker = self._breaker(tool_code, policy)
        started = time.perf_counter()
        allowed = _ALLOWED_HOSTS.set(tuple(settings.allowed_hosts))
        try:
            response, attempt = await self._with_retries(spec, headers, policy, tool_code, breaker)
        finally:
            _ALLOWED_HOSTS.reset(allowed)
        if response.status_code >= 400:
            self._failed(breaker, policy)
            raise ToolError(f"HTTP {response.status_code} from {spec.method} {_safe_url(spec.url)} for tool {tool_code}")
        breaker.failures = 0
        return {"status": response.status_code, "attempt": attempt,
                "latencyMs": round((time.perf_counter() - started) * 1000, 2), "mapped": map_response(response, spec.mapping)}

    def _breaker(self, tool_code: str, policy: HttpApiDefaults) -> Breaker:
        breaker = self.breakers.setdefault(tool_code.lower(), Breaker())
        if policy.circuit_breaker_enabled and breaker.open_until > time.monotonic():
            raise CircuitOpenError(f"Circuit open for tool {tool_code}: {breaker.failures} consecutive failures; "
                                   f"retry after {breaker.open_until - time.monotonic():.1f}s")
        return breaker

    def _failed(self, breaker: Breaker, policy: HttpApiDefaults) -> None:
        breaker.failures += 1
        if policy.circuit_breaker_enabled and breaker.failures >= policy.circuit_failure_threshold:
            breaker.open_until = time.monotonic() + policy.circuit_open_ms / 1000

    async def _with_retries(self, spec: HttpRequest, headers: dict[str, str], policy: HttpApiDefaults,
                            tool_code: str, breaker: Breaker) -> tuple[httpx.Response, int]:
        delay = policy.initial_backoff_ms / 1000
        for attempt in range(1, policy.max_attempts + 1):
            last = attempt == policy.max_attempts
            try:
                response = await self._send(spec, headers, policy)
            except httpx.TransportError as exc:
                if last or not policy.retry_on_io_exception:
                    self._failed(breaker, policy)
                    raise _transport_failed(spec, tool_code, attempt, exc) from exc
            else:
                if last or response.status_code not in policy.retry_status_codes:
                    return response, attempt
            await asyncio.sleep(delay)
            delay = min(delay * policy.backoff_multiplier, policy.max_backoff_ms / 1000)
        raise AssertionError("unreachable")

    async def _send(self, spec: HttpRequest, headers: dict[str, str],
                    policy: HttpApiDefaults) -> httpx.Response:
        timeout = httpx.Timeout(policy.read_timeout_ms / 1000, connect=policy.connect_timeout_ms / 1000)
        method = spec.method.upper()
        kwargs: dict[str, Any] = {"params": spec.query or None, "headers": headers, "timeout": timeout}
        if spec.body is not None and method not in ("GET", "DELETE"):
            kwargs["json"] = spec.body
        request = self.client.build_request(method, spec.url, **kwargs)
        response = await self.client.send(request, stream=True)
        try:
            body = await _read_body(response, spec, policy.read_timeout_ms)
        finally:
            await response.aclose()
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
        return httpx.Response(response.status_code, headers=kept, content=body, request=request)


async def _read_body(response: httpx.Response, spec: HttpRequest, timeout_ms: int) -> bytes:
    """The (decoded) body, read within ``timeout_ms`` in all and at most :data:`MAX_RESPONSE_BYTES`:
    a host that floods or drips its answer costs a bounded amount of memory and time."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise ToolError(f"the response of {spec.method} {_safe_url(spec.url)} is larger than "
                                    f"{MAX_RESPONSE_BYTES} bytes; it was not read further",
                                    code=ErrorCode.TOOL_RESULT_TOO_LARGE, recoverable=False)
                chunks.append(chunk)
    except TimeoutError:  # a transport failure like any other read timeout: retried, counted by the breaker
        raise httpx.ReadTimeout(f"the whole response took longer than {timeout_ms} ms "
                                "(mcp.http_api.defaults.read_timeout_ms bounds the whole body)",
                                request=response.request) from None
    return b"".join(chunks)


def _transport_failed(spec: HttpRequest, tool_code: str, attempt: int,
                      exc: httpx.TransportError) -> ToolError:
    scrub_chain(exc)
    tries = f"after {attempt} attempt{'s' if attempt > 1 else ''}"
    return ToolError(f"{spec.method} {_safe_url(spec.url)} failed for tool {tool_code} {tries}: "
                     f"{type(exc).__name__}: {redact_text(str(exc)) or 'no detail'}")


def request_headers(spec: HttpRequest, tool_code: str) -> dict[str, str]:
    """The headers to send (auth included); sensitive values are remembered as secrets first.

    Raises:
        ToolError: a header value is not text or holds a line break or control character (named
            by header, never by value).
    """
    remember_url_password(spec.url, dynamic=True)
    headers = {**spec.headers, **_auth_headers(spec.auth)}
    for name, value in headers.items():
        if SENSITIVE_NAME.search(str(name)):
            remember_secret(value, dynamic=True)
    for name, value in headers.items():
        if not isinstance(value, str) or _CONTROL_CHARS.search(value):
            raise ToolError(f"header {name} of tool {tool_code} is not a valid header value: "
                            f"{_header_problem(value)} (the value is not shown)", recoverable=False)
    return headers


def _header_problem(value: object) -> str:
    if not isinstance(value, str):
        return f"it is {type(value).__name__}, not text"
    if value.rstrip("\r\n") != value and not _CONTROL_CHARS.search(value.rstrip("\r\n")):
        return "it ends with a line break (a token read from a file keeps its trailing newline: strip it)"
    return "it contains a line break or control character"


def _auth_headers(auth: HttpAuth) -> dict[str, str]:
    kind = auth.type.upper()
    if kind == "NONE" or not auth.value:
        return {}
    remember_secret(auth.value, dynamic=True)
    if kind == "API_KEY":
        return {auth.header or "X-API-KEY": auth.value}
    if kind in ("BEARER", "BEARER_STATIC"):
        return {"Authorization": f"{auth.prefix or 'Bearer'} {auth.value}"}
    raise ToolError(f"unknown auth type {auth.type!r}: use NONE, API_KEY or BEARER")


def map_response(response: httpx.Response, mapping: HttpMapping) -> Any:
    mode = mapping.mode.upper()
    if mode == "TEXT":
        return response.text
    try:
        data = response.json()
    except RecursionError:
        raise ToolError("the response is JSON nested too deeply to read") from None
    except ValueError:
        if mode == "RAW_JSON":
            return {"text": response.text}
        raise ToolError(f"the response is not JSON, so {mode} mapping cannot apply") from None
    if (big := numbers.first_out_of_range(data)) is not None:
        raise ToolError(f"the response holds {numbers.shown(big)}, past {numbers.RANGE_TEXT}")
    if mode == "RAW_JSON":
        return data
    if mode == "JSON_PATH":
        values = compile_jsonpath(mapping.path or "$").find(data)
        return values[0] if len(values) == 1 else values
    if mode == "FIELD_TEMPLATE":
        out = {}
        for key, path in mapping.fields.items():
            values = compile_jsonpath(path).find(data)
            out[key] = values[0] if len(values) == 1 else (values or None)
        return out
    raise ToolError(f"unknown response mapping {mapping.mode!r}: use RAW_JSON, JSON_PATH, FIELD_TEMPLATE or TEXT")


async def check_destination(url: str, allowed_hosts: list[str]) -> None:
    """Refuse non-HTTP schemes and addresses that are loopback, private, link-local or reserved.

    An early, clear refusal; the connection itself is checked again by :class:`PinnedBackend`.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlNotAllowedError(f"only http(s) URLs with a host are allowed, got {_safe_url(url)!r}")
    host = parts.hostname.lower()
    if _host_allowed(host, allowed_hosts):
        return
    _refuse_internal(host, await _resolve(host, parts.port or (443 if parts.scheme == "https" else 80)),
                     allowed_hosts, _safe_url(url))


async def _checked_addresses(host: str, port: int, allowed: list[str],
                             timeout: float | None) -> list[Address]:
    """The host's addresses (each once, in resolver order) once every one of them passed the check."""
    try:
        async with asyncio.timeout(timeout):
            addresses = list(dict.fromkeys(await _resolve(host, port)))
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"resolving {host} took longer than the connect timeout") from None
    _refuse_internal(host, addresses, allowed, f"a connection to {host}:{port}")
    return addresses


def _refuse_internal(host: str, addresses: list[Address], allowed: list[str], what: str) -> None:
    for address in addresses:
        if _internal(address) and not _address_allowed(address, allowed):
            raise UrlNotAllowedError(f"refusing {what}: {host} resolves to {address}, a private, loopback "
                                     "or link-local address (add it to mcp.http_api.allowed_hosts to allow it)")


async def _resolve(host: str, port: int) -> list[Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve {host}: {exc}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _internal(address: Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    target = mapped or address
    return bool(target.is_private or target.is_loopback or target.is_link_local or target.is_reserved
                or target.is_multicast or target.is_unspecified)


def _host_allowed(host: str, allowed: list[str]) -> bool:
    return any(host == entry.lower() for entry in allowed if "/" not in entry)


def _address_allowed(address: Address, allowed: list[str]) -> bool:
    for entry in allowed:
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def _safe_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}{parts.path}"


def request_from_dict(data: dict[str, Any]) -> HttpRequest:
    """A request spec given as a mapping (e.g. from YAML or JSON)."""
    auth = data.get("auth") or {}
    mapping = data.get("mapping") or data.get("responseMapping") or {}
    return HttpRequest(url=str(data["url"]), method=str(data.get("method", "GET")), headers=dict(data.get("headers") or {}),
                       query=dict(data.get("query") or data.get("queryParams") or {}), body=data.get("body"),
                       auth=HttpAuth(**{k: v for k, v in auth.items() if k in ("type", "value", "header", "prefix")}),
                       mapping=HttpMapping(**{k: v for k, v in mapping.items() if k in ("mode", "path", "fields")}))
