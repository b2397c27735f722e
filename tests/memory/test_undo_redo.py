"""Undo and redo through the Python API on both backends: exact states, projection, history marks,
the audit, the redo dropped by a new message, side effects, the depth limit, pruning and the lock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convengine.catalog.errors import ConversationNotFoundError, UndoError
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

CONVERSATION_KEYS = ("status", "intent", "state", "context", "input_params", "turn", "recent_turns")
MESSAGES = ["hello", "I need a loan", "purple elephants", "hello again"]


def kept(state: dict[str, Any]) -> dict[str, Any]:
    return {k: state.get(k) for k in CONVERSATION_KEYS}


async def projection(engine: Any, cid: str) -> dict[str, Any]:
    row = await engine._runtime.store.projection(cid)
    return {k: row[k] for k in ("intent_code", "state_code", "context_json", "input_params_json", "last_user_text",
                                "last_assistant_json", "status")}


async def run_turns(engine: Any, messages: list[str], params: list[dict] | None = None) -> tuple[str, list]:
    cid = None
    snapshots = []
    for i, message in enumerate(messages):
        result = await engine.aprocess(message, cid, input_params=(params or [{}] * len(messages))[i])
        cid = result.conversation_id
        snapshots.append((kept(await engine.astate(cid)), await projection(engine, cid)))
    assert cid is not None
    return cid, snapshots


async def test_three_undos_then_two_redos_give_exactly_the_states_the_conversation_had(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        params = [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}]
        cid, snaps = await run_turns(engine, MESSAGES, params)
        for back in (2, 1, 0):
            result = await engine.aundo(cid)
            assert result.action == "UNDO" and result.turn == back + 1
            assert (kept(await engine.astate(cid)), await projection(engine, cid)) == snaps[back]
        for forward in (1, 2):
            result = await engine.aredo(cid)
            assert result.action == "REDO" and result.turn == forward + 1
            assert (kept(await engine.astate(cid)), await projection(engine, cid)) == snaps[forward]
        # the prompt window is restored with the rest: two turns back in it
        assert [t["user"] for t in (await engine.astate(cid))["recent_turns"]] == MESSAGES[:3]
        history = await engine.ahistory(cid)
        assert [h["user_input"] for h in history] == MESSAGES  # marked, never deleted
        assert [h["undone"] for h in history] == [False, False, False, True]
        steps = await engine.asteps(cid)
        assert [s["undone"] for s in steps] == [False, False, False, True]
        stages = [e.stage for e in await engine.aaudit(cid)]
        assert stages.count("UNDO") == 3 and stages.count("REDO") == 2
        assert stages.count("ENGINE_RETURN") == 4  # every earlier event is kept
        last = [e for e in await engine.aaudit(cid) if e.stage in ("UNDO", "REDO")][-1]
        assert last.payload["action"] == "REDO" and last.payload["turn"] == 3


async def test_the_next_turn_continues_from_the_restored_state(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid, _ = await run_turns(engine, ["hello", "I need a loan"])
        await engine.aundo(cid)
        result = await engine.aprocess("hello", cid)
        assert result.turn == 2 and (result.intent, result.state) == ("GREETING", "IDLE")
        state = await engine.astate(cid)
        assert [t["user"] for t in state["recent_turns"]] == ["hello", "hello"]


async def test_a_message_after_an_undo_drops_the_redo(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid, _ = await run_turns(engine, MESSAGES[:3])
        await engine.aundo(cid)
        await engine.aundo(cid)
        await engine.aprocess("I need a loan", cid)
        with pytest.raises(UndoError) as refused:
            await engine.aredo(cid)
        assert refused.value.code.value == "NOTHING_TO_REDO"
        # the undone turns stay marked; the new one is not
        assert [h["undone"] for h in await engine.ahistory(cid)] == [False, True, True, False]
        # and undo still works from the new turn
        assert (await engine.aundo(cid)).turn == 1


async def test_nothing_to_undo_or_redo_is_a_clear_error(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid, _ = await run_turns(engine, ["hello"])
        with pytest.raises(UndoError) as first:
            await engine.aundo(cid)
        assert first.value.code.value == "NOTHING_TO_UNDO" and "earlier turn" in first.value.message
        with pytest.raises(UndoError) as redo:
            await engine.aredo(cid)
        assert redo.value.code.value == "NOTHING_TO_REDO"
        with pytest.raises(ConversationNotFoundError):
            await engine.aundo("00000000-0000-4000-8000-000000000000")


async def test_undo_goes_back_at_most_the_configured_depth(db_url: str) -> None:
    data = pack(settings={"conversation_memory": {"undo_depth": 2}})
    async with engine_on(db_url, data) as engine:
        cid, snaps = await run_turns(engine, MESSAGES)
        await engine.aundo(cid)
        result = await engine.aundo(cid)
        assert result.can_undo is False and result.can_redo is True
        with pytest.raises(UndoError, match="undo_depth"):
            await engine.aundo(cid)
        assert kept(await engine.astate(cid)) == snaps[1][0]


def _task_pack(**settings: Any) -> dict[str, Any]:
    rules = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_TASK", "action_value": "crm:notify", "priority": 1}]
    return pack(ce_rule=rules, settings={"conversation_memory": settings} if settings else {})


async def test_undo_past_a_turn_that_ran_a_task_reports_it(db_url: str) -> None:
    calls: list[str] = []
    async with engine_on(db_url, _task_pack(), tasks={"crm": {"notify": lambda task: calls.append("sent")}}) as engine:
        cid, _ = await run_turns(engine, ["hello", "I need a loan"])
        assert calls == ["sent"]
        result = await engine.aundo(cid)
        assert result.reversible is False
        assert [e["stage"] for e in result.side_effects] == ["SET_TASK"]
        assert (result.intent, result.state) == ("GREETING", "IDLE")
        undo = next(e for e in await engine.aaudit(cid) if e.stage == "UNDO")
        assert undo.payload["reversible"] is False and undo.payload["sideEffects"][0]["stage"] == "SET_TASK"
        redone = await engine.aredo(cid)
        assert redone.side_effects and calls == ["sent"]  # redo does not run the task again
        steps = await engine.asteps(cid)
        assert steps[1]["sideEffects"][0]["stage"] == "SET_TASK" and steps[0]["sideEffects"] == []


async def test_a_pack_can_forbid_undo_past_a_side_effect(db_url: str) -> None:
    data = _task_pack(undo_past_side_effects=False)
    async with engine_on(db_url, data, tasks={"crm": {"notify": lambda task: None}}) as engine:
        cid, snaps = await run_turns(engine, ["hello", "I need a loan"])
        with pytest.raises(UndoError) as refused:
            await engine.aundo(cid)
        assert refused.value.code.value == "UNDO_FORBIDDEN" and "SET_TASK" in refused.value.message
        assert kept(await engine.astate(cid)) == snaps[1][0]  # nothing changed
        assert "UNDO" not in [e.stage for e in await engine.aaudit(cid)]


async def test_concurrent_undo_and_message_are_serialised(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid, _ = await run_turns(engine, ["hello", "I need a loan"])
        results = await asyncio.gather(engine.aundo(cid), engine.aprocess("purple elephants", cid))
        _, turn = results
        state = await engine.astate(cid)
        history = await engine.ahistory(cid)
        assert state["turn"] == 2  # either order ends two turns in
        if turn.turn == 3:  # the message ran first, then undo took it back
            assert [h["undone"] for h in history] == [False, False, True]
            assert [t["user"] for t in state["recent_turns"]] == ["hello", "I need a loan"]
        else:  # undo first, then the message continued from turn 1
            assert turn.turn == 2 and [h["undone"] for h in history] == [False, True, False]
            assert [t["user"] for t in state["recent_turns"]] == ["hello", "purple elephants"]
        assert len(state["recent_turns"]) == state["turn"]


async def test_pruning_keeps_what_undo_needs(db_url: str) -> None:
    data = pack(settings={"conversation_memory": {"undo_depth": 3}, "checkpoint_prune_every": 2})
    async with engine_on(db_url, data) as engine:
        cid, snaps = await run_turns(engine, MESSAGES + ["I need a loan", "hello"])
        history = [h async for h in engine.graph.checkpointer.alist({"configurable": {"thread_id": cid}})]
        assert len(history) <= 4  # pruned: the head and the three earlier states undo may need
        for back in (4, 3, 2):
            await engine.aundo(cid)
            assert kept(await engine.astate(cid)) == snaps[back][0]
        await engine.aredo(cid)
        assert kept(await engine.astate(cid)) == snaps[3][0]
