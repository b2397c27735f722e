"""The HTTP load generator's client: one persistent keep-alive HTTP/1.1 connection per worker over
asyncio streams, with the request bytes encoded once.

Why not httpx: the load generator shares the machine's cores with the server and PostgreSQL, so
whatever the client spends per request (httpx builds a request, runs its connection pool and its
h11 state machine, decodes the response through several layers: about 0.6 ms more CPU a request than
this client, measured in one process against a trivial app)
is charged to the HTTP path, although a real client runs on another machine. This client does the
least an honest one must: it sends a complete request, reads the whole response (head, then exactly
``Content-Length`` bytes, or a chunked body), checks the status and that the JSON body says
``"success": true``, and opens a new connection when the server closed the previous one (after an
answer with ``Connection: close``, or an idle connection dropped by the server's keep-alive timeout).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import orjson

IDLE_S = 1.0
"""A connection idle this long is replaced before it is used: the server's keep-alive timeout (uvicorn's
5 s) must not close it under a request while the other modes of an interleaved run take their slice."""


class TurnFailed(RuntimeError):
    """A turn the server did not answer with 200 and ``"success": true``."""


def post_bytes(host: str, port: int, path: str, payload: dict[str, Any]) -> bytes:
    """A complete ``POST`` of ``payload`` as JSON (encoded once, sent as many times as needed)."""
    body = json.dumps(payload, ensure_ascii=False).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode("latin-1")
    return head + body


class KeepAlive:
    """One keep-alive connection to ``host:port``; :meth:`send` sends one request and returns its JSON body."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._used = 0.0

    async def send(self, request: bytes) -> Any:
        """The JSON body of the answer to ``request``, which must be ``200`` with ``"success": true``."""
        fresh = self._writer is None or time.monotonic() - self._used > IDLE_S
        if fresh:
            await self._reconnect()
        try:
            status, close, body = await self._exchange(request)
        except (ConnectionError, asyncio.IncompleteReadError):
            if fresh:
                raise
            # a reused connection the server had closed (its keep-alive timeout) gave no answer: once more, anew
            await self._reconnect()
            status, close, body = await self._exchange(request)
        self._used = time.monotonic()
        if close:
            await self.close()
        reply = orjson.loads(body)
        if status != 200 or not (isinstance(reply, dict) and reply.get("success") is True):
            raise TurnFailed(f"turn failed: {status} {body[:200]!r}")
        return reply

    async def _exchange(self, request: bytes) -> tuple[int, bool, bytes]:
        assert self._reader is not None and self._writer is not None
        self._writer.write(request)
        await self._writer.drain()
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunked()
        else:
            raise TurnFailed(f"an answer ({status}) with neither Content-Length nor a chunked body")
        return status, headers.get("connection", "").lower() == "close", body

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts = []
        while size := int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)
        while await self._reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the empty line
            pass
        return b"".join(parts)

    async def _reconnect(self) -> None:
        await self.close()
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass
