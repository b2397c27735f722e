"""An in-process server (uvicorn on a free port) for the memory endpoints, with session-based callers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import Request

from convengine.api import Principal, create_app
from tests.servers import in_process

MESSAGE = "/api/v1/conversation/message"
SESSIONS = {"s-alice": Principal("sso:alice"), "s-mallory": Principal("sso:mallory")}


def by_session(request: Request) -> Principal | None:
    return SESSIONS.get(request.headers.get("x-session", ""))


def as_(who: str) -> dict[str, str]:
    return {"X-Session": f"s-{who}"}


@asynccontextmanager
async def served(db_url: str, pack_data: Any, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    # each test serves its own pack, whatever the database held before (another pack of the same test)
    app = create_app(db_url, pack=pack_data, authenticate=by_session, host="0.0.0.0", replace=True, **options)
    async with in_process(app) as client:
        yield client
