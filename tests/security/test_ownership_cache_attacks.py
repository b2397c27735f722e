"""A conversation's owner is remembered per process (``convengine.owners``: "written with its row and
never changes"), but erasing a user's conversations (``forget_user(..., conversations=True)``,
``POST /api/v1/users/forget``) deletes the row, so the id can be created again by another caller.
A worker that remembered the first owner then lets that owner read and continue the new owner's
conversation (its audit, and its user's long-term properties in the replies).

Two engines on one database stand for two server workers.
"""

from __future__ import annotations

import uuid

import pytest

from convengine import Engine
from convengine.errors import ConversationNotFoundError
from tests.security.test_identity_attacks import MEMORY_PACK, TASKS

pytestmark = pytest.mark.asyncio


@pytest.mark.xfail(strict=True, reason=(
    "KnownOwners (convengine/owners.py) caches a conversation's owner per process and is never told "
    "of erasure: after forget_user(conversations=True) deletes the row on one worker and another key "
    "creates the same id, a worker that cached the first owner grants it the new conversation. Fix: keep "
    "an ownership tombstone when erasing (the ce_conversation row's owner_id stays, so an erased id is "
    "never re-created by another caller), or drop the cached owner on erasure in every worker (the "
    "PostgreSQL LISTEN/NOTIFY bridge) and re-check ownership in the turn's transaction"))
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
