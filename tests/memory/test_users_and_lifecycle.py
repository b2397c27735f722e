"""Users and the conversation lifecycle through the Python API on both backends."""

from __future__ import annotations

import uuid

import pytest

from convengine.catalog.errors import (
    ConvEngineError,
    ConversationEndedError,
    ConversationNotFoundError,
    InvalidInputError,
)
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack
from tests.security.world import World, assert_unchanged

pytestmark = pytest.mark.asyncio


async def stored_user(engine, cid: str) -> str | None:
    return (await engine._runtime.store.projection(cid))["user_id"]


async def test_a_conversation_belongs_to_the_user_of_its_first_turn(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello", user_id="ana")).conversation_id
        assert await stored_user(engine, cid) == "ana"
        assert (await engine.aprocess("a loan", cid)).intent == "LOAN"  # no user given: continues as stored
        assert (await engine.aprocess("hello", cid, user_id="ana")).turn == 3
        before = World.capture(db_url)
        with pytest.raises(ConversationNotFoundError):
            await engine.aprocess("hello", cid, user_id="bob")
        assert_unchanged(before, World.capture(db_url))
        assert await stored_user(engine, cid) == "ana"


async def test_a_conversation_started_without_a_user_cannot_be_claimed(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        with pytest.raises(ConversationNotFoundError):
            await engine.aprocess("hello", cid, user_id="ana")
        assert await stored_user(engine, cid) is None


@pytest.mark.parametrize("user_id", ["", "   ", 42, "x" * 201, "ana\nbob"])
async def test_a_bad_user_id_is_refused(sqlite_engine: object, user_id: object) -> None:
    import asyncio

    with pytest.raises(InvalidInputError, match="user_id"):
        await asyncio.to_thread(sqlite_engine.process, "hello", None, None, False, user_id=user_id)  # type: ignore[attr-defined]


async def test_lifecycle_ready_in_progress_ended_interrupted(db_url: str) -> None:
    data = pack(settings={"conversation_memory": {"end_states": ["START"]}})
    async with engine_on(db_url, data) as engine:
        seeded = str(uuid.uuid4())
        await engine.aseed(seeded, context={"x": 1})
        assert await engine.alifecycle(seeded) == "READY"
        first = await engine.aprocess("hello")
        assert first.lifecycle == "IN_PROGRESS" and await engine.alifecycle(first.conversation_id) == "IN_PROGRESS"
        ended = await engine.aprocess("a loan", first.conversation_id)
        assert ended.lifecycle == "ENDED" and ended.status == "RUNNING"
        before = World.capture(db_url)
        with pytest.raises(ConversationEndedError) as refused:
            await engine.aprocess("hello", first.conversation_id)
        assert refused.value.recoverable and refused.value.code.value == "CONVERSATION_ENDED"
        assert_unchanged(before, World.capture(db_url))
        again = await engine.aprocess("hello", first.conversation_id, reset=True)
        assert again.lifecycle == "IN_PROGRESS" and again.intent == "GREETING"
        # undo takes back the end too
        await engine.aprocess("a loan", first.conversation_id)
        await engine.aundo(first.conversation_id)
        assert await engine.alifecycle(first.conversation_id) == "IN_PROGRESS"
        with pytest.raises(ConversationNotFoundError):
            await engine.alifecycle(str(uuid.uuid4()))


async def test_a_failed_turn_leaves_the_conversation_interrupted(db_url: str) -> None:
    def explode(turn: object) -> None:
        if getattr(turn, "user_text", "") == "explode":
            raise RuntimeError("boom")

    async with engine_on(db_url, pack(), steps=[Step("explode", explode, after="rules")]) as engine:
        cid = (await engine.aprocess("hello", user_id="ana")).conversation_id
        with pytest.raises(ConvEngineError):
            await engine.aprocess("explode", cid)
        assert await engine.alifecycle(cid) == "INTERRUPTED"
        assert (await engine.aprocess("a loan", cid)).lifecycle == "IN_PROGRESS"
        # a first turn that fails still binds its user
        fresh = str(uuid.uuid4())
        with pytest.raises(ConvEngineError):
            await engine.aprocess("explode", fresh, user_id="bob")
        assert await engine.alifecycle(fresh) == "INTERRUPTED" and await stored_user(engine, fresh) == "bob"
