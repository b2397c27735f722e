"""Replay over HTTP shows a caller only its own conversations: a key with the replay scope replays the
conversations it created, never another key's or tenant's, and no body field widens that; a key
without the scope is refused (both backends)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import Request

from convengine.api.app import create_app
from convengine.api.auth import Principal
from convengine.config_loader.companions import pack_options
from tests.api.auth_support import assert_refused, bearer
from tests.console.support import PACK, scripted_model
from tests.servers import in_process

pytestmark = pytest.mark.asyncio

PRINCIPALS = {"key-a": Principal("key:a", scopes=frozenset({"replay"})),
              "key-b": Principal("tenant:b", scopes=frozenset({"replay"})),
              "key-plain": Principal("key:plain"),
              "key-admin": Principal("admin", admin=True)}
REPLAY = "/api/v1/versions/replay"


def authenticate(request: Request) -> Principal | None:
    return PRINCIPALS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


async def conversation(client: httpx.AsyncClient, key: str) -> str:
    response = await client.post("/api/v1/conversation/message", json={"message": "I'd like a pizza"},
                                 headers=bearer(key))
    assert response.status_code == 200 and response.json()["success"], response.text
    return str(response.json()["conversationId"])


async def replayed(client: httpx.AsyncClient, key: str, **body: Any) -> set[str]:
    response = await client.post(REPLAY, json={"last": 50, **body}, headers=bearer(key))
    assert response.status_code == 200, response.text
    report = response.json()
    return {c["conversationId"] for c in report["replayed"]} | {c["conversationId"] for c in report["notReplayable"]}


async def test_a_key_replays_only_its_own_conversations(db_url: str) -> None:
    app = create_app(db_url, **pack_options(PACK, None), llm=scripted_model(), authenticate=authenticate,
                     settings={"llm": {"log_calls": True}, "api": {"auth": {"conversation_ownership": True}}})
    async with in_process(app) as client:
        mine, theirs = await conversation(client, "key-a"), await conversation(client, "key-b")
        assert await replayed(client, "key-a") == {mine}
        assert await replayed(client, "key-b") == {theirs}
        assert await replayed(client, "key-a", intent=None, feedback=None) == {mine}
        assert await replayed(client, "key-admin") == {mine, theirs}
        for widen in ({"owner": None}, {"owner": "tenant:b"}, {"conversationIds": [theirs]}, {"all": True}):
            refused = await client.post(REPLAY, json={"last": 50, **widen}, headers=bearer("key-a"))
            assert refused.status_code == 422, refused.text
        assert_refused(await client.post(REPLAY, json={}, headers=bearer("key-plain")), 403, "FORBIDDEN",
                       "replay scope")
        assert_refused(await client.post(REPLAY, json={"liveLlm": True}, headers=bearer("key-a")), 403,
                       "FORBIDDEN", "admin")
