"""``convengine serve``: the engine opened first (so bad settings fail with one line before the server
starts), then uvicorn with the API's limits: connections served at once, request-head size and time.

uvicorn's h11 protocol enforces the head size (``h11_max_incomplete_event_size``); this module's
subclass also drops a connection that has not sent a complete request head within
``api.header_timeout_s`` (uvicorn itself only times out idle keep-alive connections) and answers
an oversized head with 431 in ConvEngine's error shape.

Slowloris: uvicorn's ``limit_concurrency`` counts open *connections* as well as requests, so a client
holding hundreds of connections that never finish their head made every complete request (``/health``
included) a 503 until the head timeout dropped them. The subclass counts only requests whose head has
arrived (``api.max_concurrency``), and caps the connections one client address may hold
(``api.max_connections_per_client``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import h11
import uvicorn
from fastapi import FastAPI
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.loops.auto import auto_loop_factory
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from convengine.api.app import create_app
from convengine.api.config import resolve_api
from convengine.api.pack_watch import PackWatcher
from convengine.api.refusals import error_response
from convengine.catalog.errors import ErrorCode
from convengine.engine import Engine
from convengine.security.logs import server_log_config
from convengine.settings import MAX_CONNECTIONS_PER_CLIENT, ApiSettings


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head, a request (not connection) limit
    and a per-client connection cap."""

    head_timeout_s = 10.0
    body_timeout_s = 30.0
    max_connections_per_client = MAX_CONNECTIONS_PER_CLIENT
    per_client: ClassVar[Counter[str]] = Counter()
    """Open connections per client address (one Counter per server: see :func:`bounded_protocol`)."""
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _counted: str | None = None

    def __init__(self, config: uvicorn.Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if self.limit_concurrency is not None:
            # uvicorn's own check counts every open connection; this one counts requests being served
            self.app = _RequestLimit(self.app, self.tasks, self.limit_concurrency)
            self.limit_concurrency = None

    # uvicorn's H11Protocol narrows asyncio's BaseTransport to Transport here, and so must its subclass
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        client = get_remote_addr(transport)
        address = client[0] if client else "unknown"
        cap = self.max_connections_per_client
        if cap and self.per_client[address] >= cap:
            transport.abort()  # over the cap: refused before it costs a request slot or a timer
            return
        self.per_client[address] += 1
        self._counted = address
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._cancel_head_timer()  # the head is complete
        if state is h11.SEND_BODY:
            if self._body_timer is None:  # the body has its own deadline, from the end of the head
                self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timeout)
        else:
            self._cancel_body_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted is None:
            return  # refused in connection_made: uvicorn never saw it
        self.per_client[self._counted] -= 1
        if self.per_client[self._counted] <= 0:
            del self.per_client[self._counted]
        self._counted = None
        self._cancel_head_timer()
        self._cancel_body_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A malformed or oversized request head, answered in ConvEngine's error shape."""
        limit = self.config.h11_max_incomplete_event_size or 0
        if limit and len(self.conn.trailing_data[0]) > limit:
            status, code = 431, ErrorCode.INVALID_INPUT
            msg = f"request head exceeds {limit} bytes (settings api.max_header_bytes)"
        else:
            status, code = 400, ErrorCode.INVALID_INPUT
        body = bytes(error_response(status, code, msg).body)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=status, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.transport.close()  # a body dripped slower than api.body_timeout_s holds no slot

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class _RequestLimit:
    """503 (as uvicorn answers past its limit) for a request arriving while ``limit`` requests are being served;
    ``tasks`` are the server's running requests, this one included."""

    def __init__(self, app: ASGIApp, tasks: set[asyncio.Task[None]], limit: int) -> None:
        self.app = app
        self.tasks = tasks
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and len(self.tasks) > self.limit:
            busy = PlainTextResponse("Service Unavailable", 503, headers={"connection": "close"})
            await busy(scope, receive, send)
            return
        await self.app(scope, receive, send)


def bounded_protocol(head_timeout_s: float, body_timeout_s: float = 30.0,
                     max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT) -> type[BoundedH11Protocol]:
    """A protocol class (with its own per-client counts) for one server."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {
        "head_timeout_s": head_timeout_s, "body_timeout_s": body_timeout_s,
        "max_connections_per_client": max_connections_per_client, "per_client": Counter()})


def server_config(app: FastAPI, api: ApiSettings, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn's configuration with the API's limits (``api.max_concurrency``, ``max_connections_per_client``,
    ``max_header_bytes``, ``header_timeout_s``, ``body_timeout_s``)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          http=bounded_protocol(api.header_timeout_s, api.body_timeout_s, api.max_connections_per_client),
                          limit_concurrency=api.max_concurrency,
                          h11_max_incomplete_event_size=api.max_header_bytes, log_config=server_log_config(log_level))


def addresses(host: str, port: int) -> list[str]:
    """What a server on ``host:port`` offers, one line each: the console, the API's documentation and
    the message endpoint."""
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    return [f"console:   {base}/console", f"API docs:  {base}/docs",
            f"API:       {base}/api/v1/conversation/message"]


@dataclass(frozen=True)
class ServeHooks:
    """What ``convengine serve`` adds around the server: where its addresses are told once the engine
    is open, and the pack file to re-import on change (``--reload``)."""

    announce: Callable[[str], None] | None = None
    reload_pack: Path | None = None


def serve(url: str, options: dict[str, Any], *, host: str, port: int, log_level: str,
          cors_origins: Sequence[str] = (), hooks: ServeHooks = ServeHooks()) -> None:
    """Open the engine, check the API's settings for ``host`` (ConfigError: one line saying what to set),
    then serve until interrupted."""
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        runner.run(_serve(url, options, host=host, port=port, log_level=log_level, cors_origins=cors_origins,
                          hooks=hooks))


async def _serve(url: str, options: dict[str, Any], *, host: str, port: int, log_level: str,
                 cors_origins: Sequence[str], hooks: ServeHooks) -> None:
    engine = await Engine.aopen(url, **options)
    watcher: asyncio.Task[None] | None = None
    told: asyncio.Task[None] | None = None
    try:
        api = resolve_api(engine.settings, host=host, cors_origins=cors_origins)
        app = create_app(engine=engine, host=host, cors_origins=cors_origins, close_engine=True)
        if hooks.reload_pack is not None:
            watch = PackWatcher(engine, hooks.reload_pack, **({"report": hooks.announce} if hooks.announce else {}))
            watcher = asyncio.create_task(watch.run())
        server = uvicorn.Server(server_config(app, api.settings, host=host, port=port, log_level=log_level))
        told = asyncio.create_task(_announce(server, hooks.announce, host, port)) if hooks.announce else None
        await server.serve()
    finally:
        for task in (watcher, told):
            if task is not None:
                task.cancel()
        await engine.aclose()


async def _announce(server: uvicorn.Server, announce: Callable[[str], None], host: str, port: int) -> None:
    """Tell the server's addresses once it listens (not before: a port in use fails first)."""
    while not server.started:
        await asyncio.sleep(0.05)
    for line in addresses(host, port):
        announce(line)
