"""A host's own authentication scheme through ``create_app(..., authenticate=...)``, served by uvicorn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import Request

from convengine.api import Principal, create_app
from convengine.catalog.errors import ConfigError
from tests.api.auth_support import MESSAGE, assert_refused
from tests.conftest import PACKS
from tests.servers import in_process

SESSIONS = {"s-alice": Principal("sso:alice"), "s-bob": Principal("sso:bob"), "s-ops": Principal("sso:ops", True)}


def by_session(request: Request) -> Principal | None:
    return SESSIONS.get(request.headers.get("x-session", ""))


async def by_session_async(request: Request) -> Principal | None:
    await asyncio.sleep(0)
    return by_session(request)


@asynccontextmanager
async def served(db_url: str, authenticate: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url, pack=PACKS / "api_pack.yaml", authenticate=authenticate, host="0.0.0.0")
    async with in_process(app) as client:
        yield client


@pytest.mark.parametrize("authenticate", [by_session, by_session_async])
async def test_a_custom_authenticator_decides_who_calls(db_url: str, authenticate: Callable[..., Any]) -> None:
    async with served(db_url, authenticate) as client:
        created = await client.post(MESSAGE, json={"message": "a loan"}, headers={"X-Session": "s-alice"})
        cid = created.json()["conversationId"]
        audit = f"/api/v1/conversation/audit/{cid}"
        assert (await client.get(audit, headers={"X-Session": "s-alice"})).status_code == 200
        foreign = await client.get(audit, headers={"X-Session": "s-bob"})  # as if it had not started
        assert (foreign.status_code, foreign.json()) == (200, [])
        assert_refused(await client.get(audit, headers={"X-Session": "forged"}), 401, "UNAUTHORIZED")
        assert_refused(await client.post("/api/v1/cache/refresh", headers={"X-Session": "s-bob"}), 403, "FORBIDDEN")
        assert (await client.get(audit, headers={"X-Session": "s-ops"})).status_code == 200
        assert (await client.post("/api/v1/cache/refresh", headers={"X-Session": "s-ops"})).status_code == 200


async def test_an_app_beyond_loopback_without_keys_does_not_start(db_url: str) -> None:
    app = create_app(db_url, pack=PACKS / "api_pack.yaml", host="0.0.0.0")
    with pytest.raises(ConfigError, match="refusing to serve on 0.0.0.0 without authentication"):
        async with app.router.lifespan_context(app):
            pass
