"""HTTP_API tools: request specs executed with httpx, with the safety ConvEngine's client had.

Timeouts, retries with exponential backoff on 429/502/503/504 and I/O errors, a per-tool circuit
breaker, auth NONE / API_KEY / BEARER, response mapping RAW_JSON / JSON_PATH / FIELD_TEMPLATE /
TEXT, and no requests to loopback, private, link-local or reserved addresses unless the host is
allow-listed (``mcp.http_api.allowed_hosts``: names or CIDR ranges). Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from convengine.errors import ErrorCode, ToolError
from convengine.rules.jsonpath import compile_jsonpath
from convengine.settings import HttpApiDefaults, HttpApiSettings


class UrlNotAllowedError(ToolError):
    default_code = ErrorCode.URL_NOT_ALLOWED

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, recoverable=False, **kwargs)


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


class HttpRunner:
    """Executes :class:`HttpRequest` specs (one shared httpx client, one breaker per tool code)."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self.client = client or httpx.AsyncClient(follow_redirects=False)
        self.breakers: dict[str, Breaker] = {}

    async def aclose(self) -> None:
        await self.client.aclose()

    async def execute(self, tool_code: str, spec: HttpRequest, settings: HttpApiSettings) -> dict[str, Any]:
        policy = spec.policy or settings.defaults
        await check_destination(spec.url, settings.allowed_hosts)
        breaker = self._breaker(tool_code, policy)
        started = time.perf_counter()
        response, attempt = await self._with_retries(spec, policy, tool_code, breaker)
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

    async def _with_retries(self, spec: HttpRequest, policy: HttpApiDefaults, tool_code: str,
                            breaker: Breaker) -> tuple[httpx.Response, int]:
        delay = policy.initial_backoff_ms / 1000
        for attempt in range(1, policy.max_attempts + 1):
            last = attempt == policy.max_attempts
            try:
                response = await self._send(spec, policy)
            except httpx.TransportError as exc:
                if last or not policy.retry_on_io_exception:
                    self._failed(breaker, policy)
                    tries = f"after {attempt} attempt{'s' if attempt > 1 else ''}"
                    raise ToolError(f"{spec.method} {_safe_url(spec.url)} failed for tool {tool_code} {tries}: "
                                    f"{type(exc).__name__}: {exc or 'no detail'}") from exc
            else:
                if last or response.status_code not in policy.retry_status_codes:
                    return response, attempt
            await asyncio.sleep(delay)
            delay = min(delay * policy.backoff_multiplier, policy.max_backoff_ms / 1000)
        raise AssertionError("unreachable")

    async def _send(self, spec: HttpRequest, policy: HttpApiDefaults) -> httpx.Response:
        headers = {**spec.headers, **_auth_headers(spec.auth)}
        timeout = httpx.Timeout(policy.read_timeout_ms / 1000, connect=policy.connect_timeout_ms / 1000)
        method = spec.method.upper()
        kwargs: dict[str, Any] = {"params": spec.query or None, "headers": headers, "timeout": timeout}
        if spec.body is not None and method not in ("GET", "DELETE"):
            kwargs["json"] = spec.body
        return await self.client.request(method, spec.url, **kwargs)


def _auth_headers(auth: HttpAuth) -> dict[str, str]:
    kind = auth.type.upper()
    if kind == "NONE" or not auth.value:
        return {}
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
    except ValueError:
        if mode == "RAW_JSON":
            return {"text": response.text}
        raise ToolError(f"the response is not JSON, so {mode} mapping cannot apply") from None
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
    """Refuse non-HTTP schemes and addresses that are loopback, private, link-local or reserved."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlNotAllowedError(f"only http(s) URLs with a host are allowed, got {_safe_url(url)!r}")
    host = parts.hostname.lower()
    if _host_allowed(host, allowed_hosts):
        return
    for address in await _resolve(host, parts.port or (443 if parts.scheme == "https" else 80)):
        if _internal(address) and not _address_allowed(address, allowed_hosts):
            raise UrlNotAllowedError(f"refusing {_safe_url(url)}: {host} resolves to {address}, a private, loopback "
                                     "or link-local address (add it to mcp.http_api.allowed_hosts to allow it)")


async def _resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve {host}: {exc}") from None
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


def _internal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    target = mapped or address
    return bool(target.is_private or target.is_loopback or target.is_link_local or target.is_reserved
                or target.is_multicast or target.is_unspecified)


def _host_allowed(host: str, allowed: list[str]) -> bool:
    return any(host == entry.lower() for entry in allowed if "/" not in entry)


def _address_allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed: list[str]) -> bool:
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
