"""Issue 34: an oversized body sent chunked (no Content-Length) is 413 MESSAGE_TOO_LARGE, as the docs
promise, like one that declares its length. Before: 422 "the body is not valid UTF-8 JSON"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from tests.api.auth_support import MESSAGE, assert_refused
from tests.security.world import assert_unchanged

LIMIT = 4096


async def _chunks(total: int) -> AsyncIterator[bytes]:
    yield b'{"message": "hi", "inputParams": {"pad": "'
    for _ in range(total // 1024):
        yield b"x" * 1024
    yield b'"}}'


async def test_an_oversized_chunked_body_is_413(serve: Any, world: Any) -> None:
    server = serve(env={"CONVENGINE_API__MAX_BODY_BYTES": str(LIMIT)})
    before = world()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        chunked = await client.post(MESSAGE, content=_chunks(LIMIT * 4), headers={"content-type": "application/json"})
        declared = await client.post(MESSAGE, content=b"{" + b" " * LIMIT * 2 + b"}",
                                     headers={"content-type": "application/json"})
        after = world()
        small = await client.post(MESSAGE, content=_chunks(LIMIT // 2), headers={"content-type": "application/json"})
    assert "content-length" not in chunked.request.headers
    assert_refused(chunked, 413, "MESSAGE_TOO_LARGE", f"exceeds {LIMIT} bytes")
    assert_refused(declared, 413, "MESSAGE_TOO_LARGE", f"exceeds {LIMIT} bytes")
    assert_unchanged(before, after)
    assert small.status_code == 200 and small.json()["success"], small.text  # chunked bodies within it work
