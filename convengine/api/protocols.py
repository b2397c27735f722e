"""The server's HTTP/1.1 protocols: uvicorn's, with the API's bounds on what a connection may hold.

Two parsers, the same bounds: :class:`BoundedHttpToolsProtocol` (httptools, a C parser: the default,
about a millisecond less CPU per request than h11 under load) and :class:`BoundedH11Protocol` (h11,
pure Python: the fallback where httptools is not installed). :func:`bounded_protocol` picks one.

Each drops a connection that has not sent a complete request head within ``api.header_timeout_s``
(uvicorn itself only times out idle keep-alive connections) or its body within ``api.body_timeout_s``,
answers a request head over ``api.max_header_bytes`` with 431 and a malformed one with 400 in
ConvEngine's error shape.

Slowloris: uvicorn's ``limit_concurrency`` counts open *connections* as well as requests, so a client
holding hundreds of connections that never finish their head made every complete request (``/health``
included) a 503 until the head timeout dropped them. These protocols count only requests whose head has
arrived (``api.max_concurrency``), and cap the connections one client address may hold
(``api.max_connections_per_client``).

Head size: h11 refuses a head that grows past ``h11_max_incomplete_event_size`` (the setting) by itself.
httptools has no such bound (it gathers a header of any length), so its protocol counts the bytes
received while a head is incomplete and answers 431 past the setting; a head that completes within
one read is measured by :class:`~convengine.api.middleware.HeadLimit`. The count starts with the read
after the previous request's end, so a head may hold at most one read (64 KiB) more before it is cut.
"""

from __future__ import annotations

import asyncio
import http
from collections import Counter
from typing import Any, ClassVar

import h11
import uvicorn
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from convengine.api.refusals import error_response
from convengine.catalog.errors import ErrorCode
from convengine.settings import MAX_CONNECTIONS_PER_CLIENT

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: h11 serves
    HttpToolsProtocol = None  # type: ignore[assignment, misc]


class BoundedProtocol(asyncio.Protocol):
    """The bounds both protocols share; a subclass says when a head or a body is awaited."""

    head_timeout_s: ClassVar[float] = 10.0
    body_timeout_s: ClassVar[float] = 30.0
    max_connections_per_client: ClassVar[int] = MAX_CONNECTIONS_PER_CLIENT
    per_client: ClassVar[Counter[str]] = Counter()
    """Open connections per client address (one Counter per server: see :func:`bounded_protocol`)."""
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    config: uvicorn.Config
    app: ASGIApp
    tasks: set[asyncio.Task[None]]
    limit_concurrency: int | None
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _counted: str | None = None

    def __init__(self, config: uvicorn.Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        # each subclass puts this class before uvicorn's protocol: super() is uvicorn's
        super().__init__(config, server_state, app_state, _loop)  # type: ignore[call-arg]
        self._count_requests_not_connections()

    # uvicorn's protocols narrow asyncio's BaseTransport to Transport here, and so must this class
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._admit(transport):
            super().connection_made(transport)
            self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._release():
            super().connection_lost(exc)

    def _count_requests_not_connections(self) -> None:
        if self.limit_concurrency is not None:
            # uvicorn's own check counts every open connection; this one counts requests being served
            self.app = _RequestLimit(self.app, self.tasks, self.limit_concurrency)
            self.limit_concurrency = None

    def _admit(self, transport: asyncio.Transport) -> bool:
        """Count the connection against its client's cap; False (and aborted) when over it."""
        client = get_remote_addr(transport)
        address = client[0] if client else "unknown"
        cap = self.max_connections_per_client
        if cap and self.per_client[address] >= cap:
            transport.abort()  # over the cap: refused before it costs a request slot or a timer
            return False
        self.per_client[address] += 1
        self._counted = address
        return True

    def _release(self) -> bool:
        """Uncount the connection and stop its deadlines; False for one refused by :meth:`_admit`."""
        if self._counted is None:
            return False  # uvicorn never saw it
        self.per_client[self._counted] -= 1
        if self.per_client[self._counted] <= 0:
            del self.per_client[self._counted]
        self._counted = None
        self._cancel_head_timer()
        self._cancel_body_timer()
        return True

    def _awaiting_head(self) -> bool:
        """No request is in progress and the next head is not complete."""
        raise NotImplementedError

    def _awaiting_body(self) -> bool:
        """A request's head has arrived, its body has not."""
        raise NotImplementedError

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _start_body_timer(self) -> None:
        if self._body_timer is None:  # the body has its own deadline, from the end of the head
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timeout)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self._awaiting_body() and not self.transport.is_closing():
            self.transport.close()  # a body dripped slower than api.body_timeout_s holds no slot

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._awaiting_head() and not self.transport.is_closing():
            self.transport.close()

    def _refuse_head(self, status: int, message: str) -> None:
        """Answer a refused request head in ConvEngine's error shape and close the connection."""
        body = bytes(error_response(status, ErrorCode.INVALID_INPUT, message).body)
        phrase = http.HTTPStatus(status).phrase
        head = (f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n")
        self.transport.write(head.encode("latin-1") + body)
        self.transport.close()

    def _head_too_large(self) -> None:
        limit = self.config.h11_max_incomplete_event_size
        self._refuse_head(431, f"request head exceeds {limit} bytes (settings api.max_header_bytes)")


class BoundedH11Protocol(BoundedProtocol, H11Protocol):
    """uvicorn's h11 protocol with the API's bounds (the fallback without httptools)."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is not h11.IDLE:
            self._cancel_head_timer()  # the head is complete
        if state is h11.SEND_BODY:
            self._start_body_timer()
        else:
            self._cancel_body_timer()

    def send_400_response(self, msg: str) -> None:
        """A malformed or oversized request head, answered in ConvEngine's error shape."""
        limit = self.config.h11_max_incomplete_event_size or 0
        if limit and len(self.conn.trailing_data[0]) > limit:
            self._head_too_large()
        else:
            self._refuse_head(400, msg)

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _awaiting_body(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(BoundedProtocol, HttpToolsProtocol):
        """uvicorn's httptools protocol with the API's bounds (the default)."""

        _head_bytes = 0
        """Bytes received since the previous request ended, while the next head is incomplete."""
        _in_head = True
        """Between the end of a request (or the connection's start) and the end of the next head."""
        _hosts = 0
        """Host headers of the head being parsed (h11 refuses none on HTTP/1.1, or more than one)."""
        _bad_head: str | None = None
        """Why this protocol refused the head being parsed (for the 400's message)."""

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if self.transport.is_closing():
                return
            limit = self.config.h11_max_incomplete_event_size
            if self._in_head:
                if limit and self._head_bytes > limit:
                    self._head_too_large()
            elif self._awaiting_body():
                self._start_body_timer()  # a body still arriving after this read

        def on_url(self, url: bytes) -> None:
            self._hosts = 0
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if name.lower() == b"host":
                self._hosts += 1
                if self._hosts > 1:  # h11 refuses it too: which one would the trusted-host check read?
                    self._bad_head = "more than one Host header"
                    raise _MalformedHead(self._bad_head)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if not self._hosts and self.parser.get_http_version() == "1.1":
                self._bad_head = "an HTTP/1.1 request without a Host header"
                raise _MalformedHead(self._bad_head)
            self._in_head = False
            self._head_bytes = 0
            self._cancel_head_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head = True
            self._cancel_body_timer()

        def send_400_response(self, msg: str) -> None:
            """A malformed request head, answered in ConvEngine's error shape (naming what was wrong when
            this protocol refused it)."""
            reason, self._bad_head = self._bad_head, None
            self._refuse_head(400, f"invalid request head: {reason}" if reason else msg)

        def _awaiting_head(self) -> bool:
            serving = self.cycle is not None and not self.cycle.response_complete
            return self._in_head and not serving and not self.pipeline

        def _awaiting_body(self) -> bool:
            return not self._in_head


if HttpToolsProtocol is not None:

    class _MalformedHead(httptools.HttpParserCallbackError):
        """Raised from a parser callback: httptools stops and uvicorn answers 400."""


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


def preferred_protocol() -> type[BoundedProtocol]:
    """httptools' protocol when httptools is installed, else h11's."""
    return BoundedH11Protocol if HttpToolsProtocol is None else BoundedHttpToolsProtocol


def bounded_protocol(head_timeout_s: float, body_timeout_s: float = 30.0,
                     max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT,
                     base: type[BoundedProtocol] | None = None) -> type[BoundedProtocol]:
    """A protocol class (with its own per-client counts) for one server, on ``base`` (the preferred one
    by default)."""
    chosen = base or preferred_protocol()
    return type(chosen.__name__, (chosen,), {
        "head_timeout_s": head_timeout_s, "body_timeout_s": body_timeout_s,
        "max_connections_per_client": max_connections_per_client, "per_client": Counter()})
