"""ASGI middleware of the API, outermost first: head limit, trusted hosts, CORS, authentication, body limit.

Each reads the :class:`~convengine.api.config.ApiConfig` the app resolved at startup (through a
getter, since the engine's settings are known only once the lifespan has opened it) and refuses
in ConvEngine's error shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convengine.api.auth import Principal, presented_key
from convengine.api.config import ApiConfig
from convengine.api.hosts import host_allowed
from convengine.api.refusals import ApiRefusal, error_response
from convengine.catalog.errors import ErrorCode

ConfigGetter = Callable[[], ApiConfig | None]
CORS_HEADERS = ("Authorization", "X-API-Key", "Content-Type", "Last-Event-ID", "Cache-Control")
HEADERS_KEY = "convengine.headers"


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers as a dict (of a repeated name, its last value, as ``dict()`` of the list gives),
    built once per request for every middleware that reads one (again if the header list was replaced)."""
    raw = scope.get("headers") or []
    cached = scope.get(HEADERS_KEY)
    if cached is not None and cached[0] is raw:
        return cached[1]
    headers = dict(raw)
    scope[HEADERS_KEY] = (raw, headers)
    return headers


async def _refuse(refusal: ApiRefusal, scope: Scope, receive: Receive, send: Send) -> None:
    await refusal.response()(scope, receive, send)


class _ConfiguredMiddleware:
    def __init__(self, app: ASGIApp, config: ConfigGetter) -> None:
        self.app = app
        self.config = config

    def current(self, scope: Scope) -> ApiConfig | None:
        """The resolved configuration for an HTTP request (None for other scopes)."""
        if scope["type"] != "http":
            return None
        config = self.config()
        if config is None:
            raise RuntimeError("the API is not started (its lifespan has not run)")
        return config


class HeadLimit(_ConfiguredMiddleware):
    """431 for a request head (request line and headers) over ``api.max_header_bytes``.

    The server bounds heads that arrive in pieces; this catches a complete one that arrived at once
    (and applies under any ASGI server)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.current(scope)
        if config is not None:
            limit = config.settings.max_header_bytes
            headers = scope.get("headers") or []
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 4 * len(headers) + sum(
                len(name) + len(value) for name, value in headers)
            if size > limit:
                message = f"request head exceeds {limit} bytes (settings api.max_header_bytes)"
                return await _refuse(ApiRefusal(431, ErrorCode.INVALID_INPUT, message), scope, receive, send)
        await self.app(scope, receive, send)


class TrustedHosts(_ConfiguredMiddleware):
    """400 HOST_NOT_ALLOWED for a Host header the server does not answer (DNS rebinding)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.current(scope)
        if config is not None:
            host = header_map(scope).get(b"host", b"").decode("latin-1")
            if not host_allowed(host, config.hosts):
                message = f"Host header {host[:100]!r} is not served here (settings api.trusted_hosts)"
                return await _refuse(ApiRefusal(400, ErrorCode.HOST_NOT_ALLOWED, message), scope, receive, send)
        await self.app(scope, receive, send)


class Cors(_ConfiguredMiddleware):
    """Starlette's CORSMiddleware for the configured origins (built on the first request); none: no CORS."""

    def __init__(self, app: ASGIApp, config: ConfigGetter) -> None:
        super().__init__(app, config)
        self.inner: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.current(scope)
        if config is None:
            return await self.app(scope, receive, send)
        if self.inner is None:
            self.inner = cors(self.app, config.cors_origins)
        await self.inner(scope, receive, send)


def cors(app: ASGIApp, origins: Collection[str]) -> ASGIApp:
    if not origins:
        return app
    return CORSMiddleware(app, allow_origins=list(origins), allow_methods=["GET", "POST", "OPTIONS"],
                          allow_headers=list(CORS_HEADERS))


class Authentication(_ConfiguredMiddleware):
    """Puts the caller's :class:`Principal` in ``request.state.principal``; 401 without valid credentials.

    Public paths (health, OpenAPI docs) need none. With authentication off every caller is an
    admin named after its address.
    """

    def __init__(self, app: ASGIApp, config: ConfigGetter, public: Collection[str]) -> None:
        super().__init__(app, config)
        self.public = frozenset(public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.current(scope)
        if config is not None and scope["path"] not in self.public:
            principal = await _principal(config, Request(scope))
            if principal is None:
                return await _refuse(_unauthorized(Request(scope), config), scope, receive, send)
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


RELAY_HEADERS = (b"forwarded", b"x-forwarded-for", b"x-real-ip")


async def _principal(config: ApiConfig, request: Request) -> Principal | None:
    if config.authenticate is None:
        if config.refuse_relayed and any(h in header_map(request.scope) for h in RELAY_HEADERS):
            return None  # a proxy relays callers from elsewhere to a server that trusts loopback
        client = request.client.host if request.client else "unknown"
        return Principal(f"client:{client}", admin=True)
    found: Any = config.authenticate(request)
    if inspect.isawaitable(found):
        found = await found
    return found if isinstance(found, Principal) else None


def _unauthorized(request: Request, config: ApiConfig) -> ApiRefusal:
    if config.authenticate is None:
        return ApiRefusal(401, ErrorCode.UNAUTHORIZED,
                          "this server has no API keys and trusts loopback callers only, but the request was relayed "
                          "by a proxy: set api.auth.api_keys (or api.auth.mode=off on purpose)",
                          {"WWW-Authenticate": "Bearer"})
    offered = presented_key(request) is not None or "authorization" in request.headers
    message = ("the credentials sent are not valid" if offered else
               "authentication required: send Authorization: Bearer <key> or X-API-Key: <key>")
    return ApiRefusal(401, ErrorCode.UNAUTHORIZED, message, {"WWW-Authenticate": "Bearer"})


class BodyLimit:
    """413 for request bodies over the limit (by Content-Length and by what actually arrives)."""

    def __init__(self, app: ASGIApp, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = header_map(scope).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(scope, receive, send, limit)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise _TooLarge(limit)
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(scope, receive, send, limit)


class _TooLarge(HTTPException):
    """An HTTPException, so that FastAPI's body reading passes it on (it turns any other exception raised
    while reading a body, as a chunked body without Content-Length is, into 400 "error parsing the body")."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large_message(limit))


def _too_large_message(limit: int) -> str:
    return f"request body exceeds {limit} bytes (settings.api.max_body_bytes)"


async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
    await error_response(413, ErrorCode.MESSAGE_TOO_LARGE, _too_large_message(limit))(scope, receive, send)
