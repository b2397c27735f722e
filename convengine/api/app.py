"""The FastAPI app: ConvEngine's REST contract over an Engine owned by the app's lifespan."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import convengine
from convengine.api import console_routes, contract
from convengine.api.admission import busy_response
from convengine.api.auth import Authenticate
from convengine.api.browser import OriginCheck, SecurityHeaders
from convengine.api.chain_routes import router as chain_router
from convengine.api.config import DEFAULT_HOST, ApiConfig, resolve_api
from convengine.api.flow_routes import router as flow_router
from convengine.api.memory_routes import router as memory_router
from convengine.api.middleware import Authentication, BodyLimit, Cors, HeadLimit, TrustedHosts
from convengine.api.notify import PgAuditBridge
from convengine.api.readiness import Readiness, postgres_probe, sqlite_probe
from convengine.api.refusals import ApiRefusal, error_response
from convengine.api.replay_routes import router as replay_router
from convengine.api.routes import add_direct_routes, router
from convengine.api.stats_routes import router as stats_router
from convengine.api.streams import StreamRegistry
from convengine.api.version_routes import router as versions_router
from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.catalog.errors import (
    ConvEngineError,
    ConversationNotFoundError,
    ErrorCode,
    InvalidInputError,
    MessageTooLargeError,
    ServerBusyError,
)
from convengine.chains import Chains
from convengine.engine import Engine

logger = logging.getLogger(__name__)
DEFAULT_MAX_BODY = 2_000_000
PUBLIC_PATHS = ("/health", "/ready")


def settle_startup_objects() -> None:
    """Collect, then freeze (:func:`gc.freeze`) what a started server holds: modules, the configuration,
    the compiled graph, about 300,000 objects. Python's full collections walk every tracked object; in
    a busy server one ran every few seconds and took ~150 ms, about 5% of its CPU. Frozen objects are
    not walked, and not collected: what the server drops later (a configuration replaced on reload) is
    still freed by reference counting, only a reference cycle among the frozen objects stays (100
    reloads grew a process by 2 MB with the freeze, by 4 MB without)."""
    gc.collect()
    gc.freeze()


def create_app(url: str = DEFAULT_DATABASE_URL, *, engine: Engine | None = None, host: str = DEFAULT_HOST,
               authenticate: Authenticate | None = None, cors_origins: Sequence[str] = (),
               close_engine: bool = False, freeze_gc: bool = False, **options: Any) -> FastAPI:
    """An app that opens ``Engine.aopen(url, **options)`` at startup (or serves a given engine).

    Args:
        host: the interface the server listens on; beyond loopback, authentication is required
            (``api.auth``) and any Host header is answered unless ``api.trusted_hosts`` says otherwise.
        authenticate: ``authenticate(request) -> Principal | None`` (sync or async) replacing the
            built-in API keys; None refuses the request with 401.
        cors_origins: origins allowed to call the API from a browser, besides ``api.cors.allowed_origins``.
        close_engine: close the given ``engine`` when the app shuts down.
        freeze_gc: once started, leave everything alive then out of the garbage collector's sight
            (:func:`settle_startup_objects`); for a process that serves this app only (``convengine serve``).

    Raises (at startup): ConfigError when serving on ``host`` would be unsafe, saying what to set.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = engine is None or close_engine
        served = engine or await Engine.aopen(url, **options)
        try:
            app.state.api = _resolve(served, host, authenticate, cors_origins)
            app.state.engine = served
            app.state.readiness = readiness_of(served)
            bridge = app.state.bridge = await _start_bridge(served)
            app.state.chains = Chains(served)
            scheduler = _start_scheduler(app.state.chains)
            if freeze_gc:
                settle_startup_objects()
            try:
                yield
            finally:
                if scheduler is not None:
                    await _stop_scheduler(*scheduler)
                if bridge is not None:
                    await bridge.stop()
        finally:
            if owned:
                await served.aclose()

    app = FastAPI(title="convengine", version=convengine.__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="ConvEngine-compatible conversation API (message, audit, trace, SSE stream, cache).")
    add_direct_routes(app)  # POST /api/v1/conversation/message: the hot path, first
    app.include_router(router)
    app.include_router(flow_router)
    app.include_router(memory_router)
    app.include_router(chain_router)
    app.include_router(stats_router)  # /api/v1/stats (scoped to the caller's conversations)
    console_routes.install(app)  # the web console and /docs served offline
    app.state.console_pack = options.get("pack")
    app.include_router(versions_router)  # /api/v1/versions/* (admin)
    app.include_router(replay_router)  # /api/v1/versions/replay (scope replay)
    app.state.streams = StreamRegistry()
    _middleware(app)
    _handlers(app)
    contract.install(app, lambda: public_paths(app), lambda: app.state.api.authenticate is not None)
    return app


def public_paths(app: FastAPI) -> list[str]:
    """Paths served without credentials."""
    return [*PUBLIC_PATHS, *(p for p in (app.openapi_url, app.redoc_url) if p), *console_routes.public_paths()]


def _resolve(engine: Engine, host: str, authenticate: Authenticate | None, cors_origins: Sequence[str]) -> ApiConfig:
    config = resolve_api(engine.settings, host=host, authenticate=authenticate, cors_origins=cors_origins)
    for warning in config.warnings:
        logger.warning(warning)
    return config


def _middleware(app: FastAPI) -> None:
    """Outermost first: security headers, head limit, trusted hosts, origin check, CORS, authentication,
    body limit (added innermost first)."""

    def config() -> ApiConfig | None:
        return getattr(app.state, "api", None)

    public = public_paths(app)
    app.add_middleware(BodyLimit, limit=lambda: _body_limit(app))
    app.add_middleware(Authentication, config=config, public=public)
    app.add_middleware(Cors, config=config)
    app.add_middleware(OriginCheck, config=config)
    app.add_middleware(TrustedHosts, config=config)
    app.add_middleware(HeadLimit, config=config)
    app.add_middleware(SecurityHeaders)


def readiness_of(engine: Engine) -> Readiness:
    """``GET /ready``'s probe of the engine's database."""
    url = engine.libpq_url
    probe = postgres_probe(url) if engine.is_postgres and url else sqlite_probe(engine.runtime.url.sqlite_path)
    return Readiness(probe, engine.settings.api.readiness)


async def _start_bridge(engine: Engine) -> Any:
    """Cross-process streaming through PostgreSQL LISTEN/NOTIFY (PostgreSQL only)."""
    url = engine.libpq_url
    if not engine.is_postgres or url is None or not engine.settings.transport.sse.enabled:
        return None

    bridge = PgAuditBridge(url, engine.bus)
    await bridge.start()
    return bridge


def _start_scheduler(chains: Chains) -> tuple[asyncio.Event, asyncio.Task[None]] | None:
    """Every worker polls for due chain runs (``chains.scheduler``); claims keep each run to one of them."""
    if not chains.engine.settings.chains.scheduler:
        return None
    stop = asyncio.Event()
    return stop, asyncio.get_running_loop().create_task(chains.serve(stop), name="convengine-chains-scheduler")


async def _stop_scheduler(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    try:
        await asyncio.wait_for(task, 30)
    except TimeoutError:
        task.cancel()


def _body_limit(app: FastAPI) -> int:
    engine = getattr(app.state, "engine", None)
    return engine.settings.api.max_body_bytes if engine is not None else DEFAULT_MAX_BODY


# HTTP-level failures (no engine involved) keep the error shape; engine codes where one fits.
HTTP_CODES = {400: ErrorCode.INVALID_INPUT.value, 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED",
              413: ErrorCode.MESSAGE_TOO_LARGE.value, 422: ErrorCode.INVALID_INPUT.value}


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):
            # FastAPI's answer to a body that is not UTF-8: a malformed request like any other
            return error_response(422, ErrorCode.INVALID_INPUT, "invalid request: the body is not valid UTF-8 JSON")
        return error_response(exc.status_code, HTTP_CODES.get(exc.status_code, "HTTP_ERROR"), str(exc.detail),
                              headers=exc.headers)

    @app.exception_handler(ApiRefusal)
    async def refused(_: Request, exc: ApiRefusal) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_problem(e) for e in exc.errors()]
        details = [{"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return error_response(422, ErrorCode.INVALID_INPUT, "invalid request: " + "; ".join(problems),
                              details=details)

    @app.exception_handler(Exception)
    async def failed(_: Request, exc: Exception) -> JSONResponse:  # the error shape, never a traceback (logged)
        return error_response(500, ErrorCode.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")

    @app.exception_handler(ConvEngineError)
    async def engine_error(_: Request, exc: ConvEngineError) -> JSONResponse:
        if isinstance(exc, ServerBusyError):
            return busy_response(exc)
        return error_response(_status(exc), exc.code, exc.message)


def _status(exc: ConvEngineError) -> int:
    if isinstance(exc, MessageTooLargeError):
        return 413
    if isinstance(exc, ConversationNotFoundError):
        return 404
    if isinstance(exc, InvalidInputError):
        return 422
    return 500


def _problem(error: Mapping[str, Any]) -> str:
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error") or error["msg"]
        return f"the body is not valid JSON: {reason} at position {error['loc'][-1]}"
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
