"""Issue 34: connections that send half a request head must not starve complete requests.

Before: uvicorn's ``limit_concurrency`` counted open connections, so one unauthenticated client holding
more half-open connections than ``api.max_concurrency`` made every request, ``/health`` included, a 503
until the header timeout dropped them. Now only requests whose head has arrived count, and one client
address may hold at most ``api.max_connections_per_client`` connections.

Bounded: a real server on 127.0.0.1, a few dozen sockets, each test closes its own.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

HALF_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


@contextmanager
def half_open(port: int, count: int, source: str = "127.0.0.1") -> Iterator[list[socket.socket]]:
    """``count`` connections from ``source`` that each send the start of a request head, then nothing."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.settimeout(5)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(HALF_HEAD)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def still_open(sock: socket.socket) -> bool:
    """Whether the server keeps the connection (nothing to read yet) rather than having closed it."""
    sock.settimeout(0.2)
    try:
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    except OSError:
        return False


async def test_half_open_connections_do_not_starve_complete_requests(serve: Any) -> None:
    server = serve(env={"CONVENGINE_API__MAX_CONCURRENCY": "20",
                        "CONVENGINE_API__HEADER_TIMEOUT_S": "60"})
    with half_open(server.port, 60) as attackers:
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
            answers = [await client.get("/health") for _ in range(5)]
            turn = await client.post("/api/v1/conversation/message", json={"message": "hi"})
        assert all(still_open(sock) for sock in attackers[:5])  # they are held, not merely dropped
    assert [a.status_code for a in answers] == [200] * 5, [a.text for a in answers]
    assert turn.status_code == 200 and turn.json()["success"]


async def test_one_client_address_holds_at_most_its_share_of_connections(serve: Any) -> None:
    server = serve(env={"CONVENGINE_API__MAX_CONNECTIONS_PER_CLIENT": "10", "CONVENGINE_API__HEADER_TIMEOUT_S": "60"})
    with half_open(server.port, 30, source="127.0.0.2") as attackers:
        await asyncio.sleep(0.5)
        held = sum(still_open(sock) for sock in attackers)
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
            other = await client.get("/health")  # another address is not affected
    assert held == 10
    assert other.status_code == 200


async def test_requests_being_served_still_count_against_the_limit(serve: Any) -> None:
    """Complete heads whose bodies are still arriving are requests in progress: past api.max_concurrency
    of them the next request gets 503 (the limit itself is kept)."""
    server = serve(env={"CONVENGINE_API__MAX_CONCURRENCY": "3", "CONVENGINE_API__BODY_TIMEOUT_S": "60"})
    head = (b"POST /api/v1/conversation/message HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    busy = []
    try:
        for _ in range(3):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(head)
            busy.append(sock)
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
            refused = await client.get("/health")
    finally:
        for sock in busy:
            sock.close()
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient(base_url=server.base, timeout=10) as client:
        served = await client.get("/health")
    assert refused.status_code == 503
    assert served.status_code == 200
