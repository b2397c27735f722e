"""The FastAPI app: ConvEngine's REST contract over an Engine owned by the app's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import convengine
from convengine.api.routes import router
from convengine.api.schemas import ErrorBody
from convengine.engine import Engine
from convengine.errors import (
    ConvEngineError,
    ConversationNotFoundError,
    InvalidInputError,
    MessageTooLargeError,
)
from convengine.settings import DEFAULT_DATABASE_URL

DEFAULT_MAX_BODY = 2_000_000


def create_app(url: str = DEFAULT_DATABASE_URL, *, engine: Engine | None = None, **options: Any) -> FastAPI:
    """An app that opens ``Engine.aopen(url, **options)`` at startup (or serves a given engine)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = engine is None
        app.state.engine = engine or await Engine.aopen(url, **options)
        bridge = await _start_bridge(app.state.engine)
        try:
            yield
        finally:
            if bridge is not None:
                await bridge.stop()
            if owned:
                await app.state.engine.aclose()

    app = FastAPI(title="convengine", version=convengine.__version__, lifespan=lifespan,
                  description="ConvEngine-compatible conversation API (message, audit, trace, SSE stream, cache).")
    app.include_router(router)
    app.add_middleware(BodyLimit, limit=lambda: _body_limit(app))
    _handlers(app)
    return app


async def _start_bridge(engine: Engine) -> Any:
    """Cross-process streaming through PostgreSQL LISTEN/NOTIFY (PostgreSQL only)."""
    if not engine.is_postgres or not engine.settings.transport.sse.enabled:
        return None
    from convengine.api.notify import PgAuditBridge

    bridge = PgAuditBridge(engine.libpq_url, engine.bus)
    await bridge.start()
    return bridge


def _body_limit(app: FastAPI) -> int:
    engine = getattr(app.state, "engine", None)
    return engine.settings.api.max_body_bytes if engine is not None else DEFAULT_MAX_BODY


def _error(status: int, code: str, message: str, details: list[dict[str, Any]] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=ErrorBody(errorCode=code, message=message,
                                                              details=details or []).model_dump())


HTTP_CODES = {400: "INVALID_INPUT", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "MESSAGE_TOO_LARGE"}


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # FastAPI's answer to a body that is not UTF-8: a malformed request like any other
            return _error(422, "INVALID_INPUT", "invalid request: the body is not valid UTF-8 JSON")
        response = _error(exc.status_code, HTTP_CODES.get(exc.status_code, "HTTP_ERROR"), str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_problem(e) for e in exc.errors()]
        details = [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return _error(422, "INVALID_INPUT", "invalid request: " + "; ".join(problems), details)

    @app.exception_handler(ConvEngineError)
    async def engine_error(_: Request, exc: ConvEngineError) -> JSONResponse:
        if isinstance(exc, MessageTooLargeError):
            return _error(413, exc.code.value, exc.message)
        if isinstance(exc, ConversationNotFoundError):
            return _error(404, exc.code.value, exc.message)
        if isinstance(exc, InvalidInputError):
            return _error(422, exc.code.value, exc.message)
        return _error(500, exc.code.value, exc.message)


def _problem(error: Any) -> str:
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error") or error["msg"]
        return f"the body is not valid JSON: {reason} at position {error['loc'][-1]}"
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


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
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await _too_large(send, limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    response = _error(413, "MESSAGE_TOO_LARGE", f"request body exceeds {limit} bytes (settings.api.max_body_bytes)")
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": response.body})
