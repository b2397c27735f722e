"""The server's two HTTP protocols (httptools, the default; h11, the fallback) hold the same bounds.

Attack: httptools gathers a request header of any length (h11 stops at ``h11_max_incomplete_event_size``),
so a head sent in pieces that never ends would grow in the server's memory until the head deadline.
Both protocols answer it 431 in ConvEngine's shape as soon as it passes ``api.max_header_bytes``; both
drop slow heads and bodies, cap the connections of one client address, and keep a connection whose
request is served longer than the head deadline.

In process: uvicorn on 127.0.0.1 with a small ASGI app, each protocol in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from convengine.api.protocols import BoundedH11Protocol, BoundedProtocol, bounded_protocol, preferred_protocol

PROTOCOLS = sorted({BoundedH11Protocol, preferred_protocol()}, key=lambda p: p.__name__)
LIMIT = 4096


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/slow":
        await asyncio.sleep(1.5)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def running(base: type[BoundedProtocol], *, head_s: float = 30, body_s: float = 30,
                  per_client: int = 0) -> AsyncIterator[int]:
    protocol = bounded_protocol(head_s, body_s, per_client, base=base)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=protocol, lifespan="off", log_level="error",
                            limit_concurrency=100, h11_max_incomplete_event_size=LIMIT)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def read_all(reader: asyncio.StreamReader, timeout: float = 5) -> bytes:
    return await asyncio.wait_for(reader.read(), timeout)


@pytest.mark.parametrize("base", PROTOCOLS, ids=lambda p: p.__name__)
async def test_a_head_sent_in_pieces_past_the_limit_is_answered_431(base: type[BoundedProtocol]) -> None:
    async with running(base) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 3000)
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"a" * 3000)  # the head, never finished, now passes the limit
        await writer.drain()
        reply = await read_all(reader)  # answered long before the 30 s head deadline
        writer.close()
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 431"), reply[:200]
    assert json.loads(body) == {"success": False, "errorCode": "INVALID_INPUT", "details": [],
                                "message": f"request head exceeds {LIMIT} bytes (settings api.max_header_bytes)"}


@pytest.mark.parametrize("base", PROTOCOLS, ids=lambda p: p.__name__)
async def test_slow_heads_and_bodies_are_dropped_but_a_long_answer_is_not(base: type[BoundedProtocol]) -> None:
    async with running(base, head_s=0.5, body_s=0.5) as port:
        head_r, head_w = await asyncio.open_connection("127.0.0.1", port)
        head_w.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        body_r, body_w = await asyncio.open_connection("127.0.0.1", port)
        body_w.write(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")  # body never finished
        kept_r, kept_w = await asyncio.open_connection("127.0.0.1", port)
        kept_w.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        dropped = [await read_all(head_r), await read_all(body_r)]
        answers = await asyncio.wait_for(_answers(kept_r, 2), 5)
        for writer in (head_w, body_w, kept_w):
            writer.close()
    assert dropped == [b"", b""]
    assert answers.count(b"HTTP/1.1 200") == 2  # served 1.5 s, three head deadlines, and pipelined


async def _answers(reader: asyncio.StreamReader, count: int) -> bytes:
    """What the server sends until ``count`` answers (each ``ok``) have arrived, or it closes."""
    received = b""
    while received.count(b"\r\n\r\nok") < count and (chunk := await reader.read(4096)):
        received += chunk
    return received


@pytest.mark.parametrize("base", PROTOCOLS, ids=lambda p: p.__name__)
async def test_one_address_holds_at_most_its_connections(base: type[BoundedProtocol]) -> None:
    async with running(base, per_client=3) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(5)]
        for _, writer in held:
            writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answers = []
        for reader, _ in held:
            with contextlib.suppress(ConnectionError):
                answers.append(await asyncio.wait_for(reader.read(200), 5))
        for _, writer in held:
            writer.close()
    assert sum(a.startswith(b"HTTP/1.1 200") for a in answers) == 3


@pytest.mark.parametrize("base", PROTOCOLS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("hosts", [b"Host: evil.example\r\nHost: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nhost: 127.0.0.1\r\n",
                                   b""], ids=["two-hosts", "the-same-twice", "none"])
async def test_a_head_with_two_host_headers_or_none_is_refused_before_the_app(base: type[BoundedProtocol],
                                                                             hosts: bytes) -> None:
    """Attack: with two Host headers the trusted-host check and the app could read different ones (h11 refuses
    them; httptools, the default parser, gathers both)."""
    async with running(base) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n" + hosts + b"Connection: close\r\n\r\n")
        reply = await read_all(reader)
        writer.close()
    status, _, body = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400"), reply[:200]
    assert json.loads(body)["errorCode"] == "INVALID_INPUT"


@pytest.mark.parametrize("base", PROTOCOLS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("head", [b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
                                  b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
                                  b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n"],
                         ids=["two-lengths", "space-before-colon", "unknown-transfer-coding"])
async def test_heads_that_could_smuggle_a_request_are_refused(base: type[BoundedProtocol], head: bytes) -> None:
    """Attack: a head two parsers could read differently (a proxy in front and this server) is refused."""
    async with running(base) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head)
        reply = await read_all(reader)
        writer.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
