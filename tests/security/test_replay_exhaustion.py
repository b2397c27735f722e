"""A caller with the replay scope cannot make the server replay without end: one replay runs at a time
(another gets 503 SERVER_BUSY with Retry-After while it runs; a replay runs every recorded turn through
the engine on the server's event loop), and one replay sends at most ``MAX_REPLAY_TURNS`` recorded turns
again: the conversations past that budget are listed as not replayable, with the reason (both backends)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from convengine.api.app import create_app
from convengine.config_loader.companions import pack_options
from convengine.engine import replay as replay_module
from tests.api.auth_support import assert_refused, bearer
from tests.console.support import PACK, scripted_model
from tests.security.test_replay_attacks import REPLAY, authenticate, conversation
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
SETTINGS = {"llm": {"log_calls": True}, "api": {"auth": {"conversation_ownership": True}}}


def app(db_url: str) -> object:
    return create_app(db_url, **pack_options(PACK, None), llm=scripted_model(), authenticate=authenticate,
                      settings=SETTINGS)


async def long_conversation(client: httpx.AsyncClient, key: str, turns: int) -> str:
    cid = await conversation(client, key)
    for i in range(turns - 1):
        response = await client.post("/api/v1/conversation/message", json={"message": f"hello {i}",
                                                                            "conversationId": cid}, headers=bearer(key))
        assert response.status_code == 200, response.text
    return cid


async def test_one_replay_at_a_time(db_url: str) -> None:
    async with in_process(app(db_url)) as client:
        await long_conversation(client, "key-a", 8)
        first, second = await asyncio.gather(*(client.post(REPLAY, json={"last": 5}, headers=bearer(key))
                                               for key in ("key-a", "key-b")))
        assert first.status_code == 200, first.text
        assert_refused(second, 503, "SERVER_BUSY", "another replay is running")
        assert second.headers["retry-after"]
        again = await client.post(REPLAY, json={"last": 5}, headers=bearer("key-a"))
        assert again.status_code == 200 and len(again.json()["replayed"]) == 1, again.text


async def test_a_replay_sends_a_bounded_number_of_turns(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "MAX_REPLAY_TURNS", 5)
    async with in_process(app(db_url)) as client:
        older = await long_conversation(client, "key-a", 3)
        newer = await long_conversation(client, "key-a", 4)
        response = await client.post(REPLAY, json={"last": 50}, headers=bearer("key-a"))
        assert response.status_code == 200, response.text
        report = response.json()
        assert [(c["conversationId"], c["turns"]) for c in report["replayed"]] == [(newer, 4)]
        [skipped] = report["notReplayable"]
        assert skipped["conversationId"] == older and "5 turns one replay sends again" in skipped["reason"]
