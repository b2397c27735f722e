"""An in-process server (uvicorn on a free port) for the memory endpoints, with session-based callers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import Request

from convengine.api import Principal, create_app
from tests.servers import free_port

MESSAGE = "/api/v1/conversation/message"
SESSIONS = {"s-alice": Principal("sso:alice"), "s-mallory": Principal("sso:mallory")}


def by_session(request: Request) -> Principal | None:
    return SESSIONS.get(request.headers.get("x-session", ""))


def as_(who: str) -> dict[str, str]:
    return {"X-Session": f"s-{who}"}


@asynccontextmanager
async def served(db_url: str, pack_data: Any, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url, pack=pack_data, authenticate=by_session, host="0.0.0.0", **options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task.exception()
        await asyncio.sleep(0.05)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        await task
