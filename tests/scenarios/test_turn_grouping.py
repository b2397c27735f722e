"""Audit events carry their turn: grouping a trail into turns, on both backends, with and without _meta."""

from __future__ import annotations

import pytest

from convengine.audit.turns import last_turn, split_turns, turn_steps
from convengine.catalog.errors import ConvEngineError
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio


async def test_every_event_of_a_turn_carries_its_turn_id(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello")
        await engine.aprocess("loan please", first.conversation_id)
        await engine.afeedback(first.conversation_id, "THUMBS_UP")
        turns = split_turns(await engine.aaudit(first.conversation_id))
        assert len(turns) == 2
        ids = [{e.turn_id for e in turn if e.stage != "MCP_USER_FEEDBACK"} for turn in turns]
        assert all(len(found) == 1 and None not in found for found in ids), ids
        assert ids[0] != ids[1]
        assert all(turn[0].stage == "STEP_ENTER" and turn[0].payload["step"] == "load_or_create_conversation"
                   for turn in turns)
        assert turns[1][-1].stage == "MCP_USER_FEEDBACK"  # outside a turn: belongs to the turn before it
        assert turns[0][1].meta is not None and turns[0][1].meta["turnId"] == turns[0][1].turn_id
        steps = turn_steps(turns[1])
        assert steps[0]["step"] == "load_or_create_conversation" and steps[-1]["step"] == "pipeline_end_guard"
        assert "ASSISTANT_OUTPUT" in [s["stage"] for step in steps for s in step["stages"]]


async def test_without_meta_turns_are_found_by_their_first_step(db_url: str) -> None:
    async with engine_on(db_url, pack(), audit={"persist_meta": False}) as engine:
        first = await engine.aprocess("hello")
        await engine.aprocess("loan please", first.conversation_id)
        await engine.aprocess("hello", first.conversation_id)
        events = await engine.aaudit(first.conversation_id)
        assert all(e.turn_id is None and e.meta is None for e in events)
        turns = split_turns(events)
        assert len(turns) == 3
        assert [e.payload.get("text") for e in last_turn(events) if e.stage == "USER_INPUT"] == ["hello"]


async def test_a_failing_final_transformer_fails_the_turn_and_its_events_stay_in_that_turn(db_url: str) -> None:
    def final(payload: dict, session: dict) -> dict:
        raise RuntimeError("transformer broke")

    async with engine_on(db_url, pack(), response_transformers={("LOAN", "START", "FINAL"): final}) as engine:
        first = await engine.aprocess("hello")
        with pytest.raises(ConvEngineError):
            await engine.aprocess("loan please", first.conversation_id)
        state = await engine.astate(first.conversation_id)
        assert (state["intent"], state["state"], state["turn"]) == ("GREETING", "IDLE", 1)  # rolled back
        assert [h["user_input"] for h in await engine.ahistory(first.conversation_id)] == ["hello"]
        again = await engine.aprocess("hello", first.conversation_id)
        assert again.turn == 2
        turns = split_turns(await engine.aaudit(first.conversation_id))
        assert len(turns) == 3
        failed = [e.stage for e in turns[1]]
        assert "STEP_ERROR" in failed and failed[-1] in ("ENGINE_KNOWN_FAILURE", "ENGINE_UNKNOWN_FAILURE")
        assert "ENGINE_KNOWN_FAILURE" not in [e.stage for e in turns[2]]
