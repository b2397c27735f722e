"""A turn starts from this process's copy of its conversation's last checkpoint only while that copy
is what the database holds: another engine's turn on the same conversation, an undo, a failed turn
and pruning are all seen by the next turn (both backends)."""

from __future__ import annotations

from typing import Any

import pytest

from convengine import Engine
from convengine.catalog import state as keys
from convengine.catalog.errors import InvalidInputError
from convengine.checkpointing.bound import TurnSaver
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

RECENT_KEYS = (keys.TURN, keys.INTENT, keys.STATE, keys.INPUT_PARAMS, "recent_turns")


def saver(engine: Engine) -> TurnSaver:
    checkpointer = engine.graph.checkpointer
    assert isinstance(checkpointer, TurnSaver)
    return checkpointer


def view(state: dict[str, Any]) -> dict[str, Any]:
    return {k: state.get(k) for k in RECENT_KEYS}


async def test_a_conversations_next_turn_starts_from_the_kept_checkpoint_and_sees_what_the_database_has(
        db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello", input_params={"a": 1})).conversation_id
        recent = saver(engine).recent
        hits = recent.hits
        await engine.aprocess("I need a loan", cid, input_params={"b": 2})
        assert recent.hits == hits + 1  # the checkpoint was not read back
        kept = view(await engine.astate(cid))  # read from the database
        assert kept[keys.TURN] == 2 and kept[keys.INPUT_PARAMS] == {"a": 1, "b": 2}
        assert [t["user"] for t in kept["recent_turns"]] == ["hello", "I need a loan"]


async def test_another_engines_turn_in_between_is_read_from_the_database_not_hidden_by_the_copy(db_url: str) -> None:
    async with engine_on(db_url, pack()) as first, engine_on(db_url, pack()) as second:
        cid = (await first.aprocess("hello", input_params={"a": 1})).conversation_id
        await first.aprocess("hello again", cid)
        await second.aprocess("I need a loan", cid, input_params={"b": 2})  # another worker
        misses = saver(first).recent.misses
        result = await first.aprocess("hello", cid)
        assert saver(first).recent.misses == misses + 1
        state = view(await first.astate(cid))
        assert state[keys.TURN] == 4 and state[keys.INPUT_PARAMS] == {"a": 1, "b": 2}
        assert [t["user"] for t in state["recent_turns"]][-3:] == ["hello again", "I need a loan", "hello"]
        assert result.intent == "GREETING"


async def test_after_an_undo_the_next_turn_continues_from_the_undone_state(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello", input_params={"a": 1})).conversation_id
        await engine.aprocess("I need a loan", cid, input_params={"b": 2})
        await engine.aundo(cid)
        await engine.aprocess("hello again", cid, input_params={"c": 3})
        state = view(await engine.astate(cid))
        assert state[keys.INPUT_PARAMS] == {"a": 1, "c": 3}  # the undone turn's param is gone
        assert [t["user"] for t in state["recent_turns"]] == ["hello", "hello again"]


async def test_a_failed_turn_leaves_the_next_one_on_the_last_committed_checkpoint(db_url: str) -> None:
    def fail_on_boom(turn: Any) -> None:
        if turn.get(keys.USER_TEXT) == "boom":
            raise InvalidInputError("boom is not an answer")

    async with engine_on(db_url, pack(), steps=[Step("check", fail_on_boom, after="rules")]) as engine:
        cid = (await engine.aprocess("hello", input_params={"a": 1})).conversation_id
        await engine.aprocess("I need a loan", cid)
        with pytest.raises(InvalidInputError):
            await engine.aprocess("boom", cid, input_params={"z": 9})
        await engine.aprocess("hello again", cid)
        state = view(await engine.astate(cid))
        assert state[keys.TURN] == 3 and state[keys.INPUT_PARAMS] == {"a": 1}
        assert [t["user"] for t in state["recent_turns"]] == ["hello", "I need a loan", "hello again"]


async def test_pruning_drops_the_copy_so_the_next_turn_reads_the_pruned_checkpoint(db_url: str) -> None:
    async with engine_on(db_url, pack(settings={"checkpoint_prune_every": 2})) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        for text in ("I need a loan", "hello", "hello again"):
            await engine.aprocess(text, cid)
        await engine._runtime.turns.pruned(cid)
        assert saver(engine).recent.get(cid, "") is None
        await engine.aprocess("hello", cid)
        assert (await engine.astate(cid))[keys.TURN] == 5
