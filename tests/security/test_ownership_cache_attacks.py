"""Erasing a user's conversations (``forget_user(..., conversations=True)``, ``POST /api/v1/users/forget``)
deletes their rows, so the id can be created again by another caller. A worker that had seen the first
owner must not let it read or continue the new owner's conversation (its audit, trace, stream,
feedback, and its user's long-term properties in the replies): ownership is read from the database on
every read, and a turn checks the owner it reads under its own lock. The same key may start its own
erased id afresh.

Two engines (or two apps) on one database stand for two server workers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from convengine import Engine
from convengine.api import create_app
from convengine.catalog.errors import ConversationNotFoundError
from tests.api.auth_support import MESSAGE, USER_A, USER_B, bearer
from tests.security.test_identity_attacks import AUTH, FORGET, MEMORY_PACK, TASKS, say
from tests.servers import in_process

pytestmark = pytest.mark.asyncio


async def test_an_erased_conversation_id_reused_by_another_key_stays_out_of_reach_of_the_first(db_url: str) -> None:
    first_worker = await Engine.aopen(db_url, pack=MEMORY_PACK, tasks=TASKS)
    second_worker = await Engine.aopen(db_url, pack=MEMORY_PACK, tasks=TASKS)
    try:
        cid = str(uuid.uuid4())
        await first_worker.aprocess("hello", cid, owner="key:attacker", user_id="mallory")
        assert await first_worker.aaudit(cid, owner="key:attacker")  # the first worker remembers the owner
        erased = await second_worker.aforget_user("mallory", conversations=True, owner="key:attacker")
        assert erased["conversations"] == 1
        await second_worker.aprocess("hello, my pin is 4321, language de", cid, owner="key:victim", user_id="vic")

        with pytest.raises(ConversationNotFoundError):
            await first_worker.aaudit(cid, owner="key:attacker")
        with pytest.raises(ConversationNotFoundError):
            await first_worker.aprocess("hello again", cid, owner="key:attacker")
    finally:
        await first_worker.aclose()
        await second_worker.aclose()


@asynccontextmanager
async def worker(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url, pack=MEMORY_PACK, tasks=TASKS, host="0.0.0.0", settings={"api": {"auth": AUTH}})
    async with in_process(app) as client:
        yield client


async def _erase_then_recreate(first: httpx.AsyncClient, second: httpx.AsyncClient, cid: str) -> None:
    """USER_A's conversation ``cid``, seen by the first worker, erased on the second and started again
    there by USER_B (whose user says a pin and a language)."""
    await say(first, USER_A, "hello", cid, user="mallory")
    assert (await first.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_A))).status_code == 200
    erased = await second.post(FORGET, json={"userId": "mallory", "conversations": True}, headers=bearer(USER_A))
    assert erased.status_code == 200 and erased.json()["conversations"] == 1, erased.text
    await say(second, USER_B, "hello, my pin is 4321, language de", cid, user="vic")


async def test_every_route_refuses_the_first_key_once_another_key_has_the_erased_id(db_url: str) -> None:
    async with worker(db_url) as first, worker(db_url) as second:
        cid = str(uuid.uuid4())
        await _erase_then_recreate(first, second, cid)
        attacker = bearer(USER_A)
        unknown = str(uuid.uuid4())
        for path in ("/api/v1/conversation/audit/{}", "/api/v1/conversation/audit/{}/trace"):
            refused = await first.get(path.format(cid), headers=attacker)
            never_was = await first.get(path.format(unknown), headers=attacker)
            assert refused.status_code == never_was.status_code == 200, (path, refused.text)
            assert refused.text.replace(cid, unknown) == never_was.text  # the answer for an id never used
            assert "my pin is 4321" not in refused.text
        stream = await first.get(f"/api/v1/conversation/stream/{cid}", headers=attacker)
        assert stream.status_code == 404, stream.text
        feedback = await first.post("/api/v1/conversation/feedback", headers=attacker,
                                    json={"conversationId": cid, "feedbackType": "THUMBS_UP"})
        assert feedback.status_code == 404, feedback.text
        turn = await first.post(MESSAGE, json={"message": "hello again", "conversationId": cid}, headers=attacker)
        assert turn.status_code == 404, turn.text
        assert "my pin is 4321" not in turn.text and "(de)" not in turn.text
        # the new owner's conversation is whole and untouched by the refused calls
        owner_view = (await first.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_B))).text
        assert "my pin is 4321" in owner_view and "hello again" not in owner_view and "THUMBS_UP" not in owner_view
        again = await say(first, USER_B, "hello", cid, user="vic")
        assert again["context"]["language"] == "de"


async def test_the_same_key_starts_its_own_erased_id_afresh(db_url: str) -> None:
    async with worker(db_url) as first, worker(db_url) as second:
        cid = str(uuid.uuid4())
        await say(first, USER_A, "hello, language fr", cid, user="mallory")
        erased = await second.post(FORGET, json={"userId": "mallory", "conversations": True},
                                   headers=bearer(USER_A))
        assert erased.json() == {"properties": 1, "conversations": 1}, erased.text
        gone = await first.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_A))
        assert gone.status_code == 200 and gone.json() == [], gone.text
        fresh = await say(first, USER_A, "hello", cid, user="mallory")
        assert "language" not in fresh["context"]  # nothing of the erased conversation or user comes back
        audit = (await second.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_A))).text
        assert "language fr" not in audit and "hello" in audit
        other = await second.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_B))
        assert other.status_code == 200 and other.json() == [], other.text
        taken = await second.post(MESSAGE, json={"message": "hello", "conversationId": cid}, headers=bearer(USER_B))
        assert taken.status_code == 404, taken.text
