"""Conversations with a ce_conversation row but no checkpoint (ConvEngine's, Studio's) are continued."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url
from tests.helpers import engine_on, payload_of, turn_events

SUPPORT = Path(__file__).parents[2] / "examples" / "support_desk.yaml"


def convengine_row(url: str, cid: str, *, intent: str, state: str, context: str, params: str,
                   history: list[tuple[str, str]]) -> None:
    """A conversation as ConvEngine writes it: the projection row and its history rows, no checkpoint."""
    engine = create_sync_engine(parse_database_url(url))
    json = "CAST({} AS jsonb)" if engine.dialect.name == "postgresql" else "{}"
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, context_json, "
            f"input_params_json, last_user_text, created_at, updated_at) VALUES (:cid, 'RUNNING', :intent, :state, "
            f"{json.format(':context')}, {json.format(':params')}, :last, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"),
            {"cid": cid, "intent": intent, "state": state, "context": context, "params": params,
             "last": history[-1][0] if history else None})
        for user, assistant in history:
            conn.execute(sa.text(
                "INSERT INTO ce_conversation_history (conversation_id, user_input, assistant_output, created_at, "
                f"modified_at) VALUES (:cid, :user, {json.format(':assistant')}, CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP)"), {"cid": cid, "user": user, "assistant": assistant})
    engine.dispose()


async def test_a_convengine_conversation_continues_where_it_was(db_url: str) -> None:
    cid = str(uuid.uuid4())
    async with engine_on(db_url, SUPPORT, tasks=_tasks()) as engine:
        convengine_row(db_url, cid, intent="CANCEL_ORDER", state="ASK_REASON",
                       context='{"order_id": "A-2002", "pending_clarification": {"question": null}}',
                       params='{"channel": "web", "pending_action_result": "EXECUTED"}',
                       history=[("hello", '{"type": "TEXT", "value": "Hello!"}'),
                                ("cancel my order", '{"type": "TEXT", "value": "Why would you like to cancel?"}')])
        result = await engine.aprocess("it arrived damaged", cid)
        assert (result.intent, result.state, result.turn) == ("CANCEL_ORDER", "CONFIRM", 3)
        assert result.context["order_id"] == "A-2002"
        adopted = payload_of(await turn_events(engine, cid), "CONVERSATION_ADOPTED")
        assert (adopted["intent"], adopted["state"], adopted["turns"]) == ("CANCEL_ORDER", "ASK_REASON", 2)
        assert adopted["problems"] == ["input_params_json: engine-computed keys dropped: pending_action_result"]
        state = await engine.astate(cid)
        assert state["input_params"].get("channel") == "web" and "pending_action_result" not in state["input_params"]
        assert [t["user"] for t in state["recent_turns"]][:2] == ["hello", "cancel my order"]
        done = await engine.aprocess("yes", cid)
        assert (done.state, done.turn) == ("CANCELLED", 4)
        assert [h["user_input"] for h in await engine.ahistory(cid)] == ["hello", "cancel my order",
                                                                       "it arrived damaged", "yes"]


async def test_a_stored_value_that_is_not_an_object_is_adopted_as_empty_and_reported(db_url: str) -> None:
    cid = str(uuid.uuid4())
    async with engine_on(db_url, SUPPORT, tasks=_tasks()) as engine:
        convengine_row(db_url, cid, intent="GREETING", state="IDLE", context="[1, 2]", params='"text"', history=[])
        result = await engine.aprocess("where is my order", cid)
        assert result.turn == 1 and result.intent == "ORDER_STATUS"
        problems = payload_of(await turn_events(engine, cid), "CONVERSATION_ADOPTED")["problems"]
        assert [p.split(":")[0] for p in problems] == ["context_json", "input_params_json"]


async def test_malformed_json_stored_by_hand_never_fails_the_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    cid = str(uuid.uuid4())
    async with engine_on(url, SUPPORT, tasks=_tasks()) as engine:
        convengine_row(url, cid, intent="GREETING", state="IDLE", context='{"broken": ', params="[[[[",
                       history=[("hello", "not json at all")])
        result = await engine.aprocess("hello", cid)
        assert (result.intent, result.turn) == ("GREETING", 2)


def _tasks() -> dict[str, Any]:
    class Orders:
        def cancel(self, task: Any) -> None:
            task.context["cancelled_order"] = task.context.get("order_id")

    return {"orderTasks": Orders()}
