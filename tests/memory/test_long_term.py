"""Long-term properties in LangGraph's store on both backends: across a user's conversations, never
another user's, saved only by turns that commit, restored by undo, erased on request."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConvEngineError
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

# A rule keeps the customer's preferred language in the context (a long-term property) and a response
# shows it; any other message leaves it as it is.
RULES = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
          "match_pattern": "(?i)french", "action": "SET_TASK", "action_value": "prefs:french", "priority": 1}]
RESPONSES = [{"intent_code": "GREETING", "state_code": "IDLE", "exact_text": "Hello ({{context.language}})",
              "priority": 1}]


def memory_pack(**settings: Any) -> dict[str, Any]:
    return pack(ce_rule=RULES, ce_response=RESPONSES,
                settings={"conversation_memory": {"long_term": ["language"], **settings}})


def french(task: Any) -> None:
    task.context["language"] = "fr"


TASKS = {"prefs": {"french": french}}


async def test_a_long_term_property_reaches_the_first_turn_of_the_users_next_conversation(db_url: str) -> None:
    async with engine_on(db_url, memory_pack(), tasks=TASKS) as engine:
        first = await engine.aprocess("a loan in french please", user_id="ana")
        assert first.context["language"] == "fr"
        assert await engine.aproperties("ana") == {"language": "fr"}
        saved = [e for e in await engine.aaudit(first.conversation_id) if e.stage == "LONG_TERM_PROPERTIES_SAVED"]
        assert saved[0].payload == {"properties": ["language"]}
        nxt = await engine.aprocess("hello", user_id="ana")
        assert nxt.conversation_id != first.conversation_id
        assert nxt.context["language"] == "fr" and nxt.payload.value == "Hello (fr)"
        loaded = [e for e in await engine.aaudit(nxt.conversation_id) if e.stage == "LONG_TERM_PROPERTIES_LOADED"]
        assert loaded[0].payload == {"properties": ["language"]}
        other = await engine.aprocess("hello", user_id="bob")
        assert "language" not in other.context
        assert await engine.aproperties("bob") == {}
        anonymous = await engine.aprocess("hello")
        assert "language" not in anonymous.context


async def test_a_failed_turn_saves_nothing(db_url: str) -> None:
    def explode(turn: Any) -> None:
        if "explode" in turn.user_text:
            raise RuntimeError("boom")

    async with engine_on(db_url, memory_pack(), tasks=TASKS, steps=[Step("explode", explode, after="rules")]) as engine:
        cid = (await engine.aprocess("a loan", user_id="ana")).conversation_id
        with pytest.raises(ConvEngineError):
            await engine.aprocess("french explode", cid)
        assert await engine.aproperties("ana") == {}
        await engine.aprocess("french", cid)
        assert await engine.aproperties("ana") == {"language": "fr"}


async def test_undo_takes_back_the_long_term_property_the_turn_wrote(db_url: str) -> None:
    async with engine_on(db_url, memory_pack(), tasks=TASKS) as engine:
        cid = (await engine.aprocess("a loan", user_id="ana")).conversation_id
        await engine.aprocess("in french", cid)
        assert await engine.aproperties("ana") == {"language": "fr"}
        await engine.aundo(cid)
        assert await engine.aproperties("ana") == {}
        await engine.aredo(cid)
        assert await engine.aproperties("ana") == {"language": "fr"}


async def test_erasing_a_user_leaves_nothing_of_theirs(db_url: str) -> None:
    async with engine_on(db_url, memory_pack(), tasks=TASKS) as engine:
        mine = [(await engine.aprocess("a loan in french", user_id="ana")).conversation_id,
                (await engine.aprocess("hello", user_id="ana")).conversation_id]
        theirs = (await engine.aprocess("a loan in french", user_id="bob")).conversation_id
        erased = await engine.aforget_user("ana", conversations=True)
        assert erased == {"properties": 1, "conversations": 2}
        assert await engine.aproperties("ana") == {}
        assert await engine.aproperties("bob") == {"language": "fr"}
        for cid in mine:
            with pytest.raises(ConvEngineError):
                await engine.ahistory(cid)
            snap = await engine.graph.aget_state({"configurable": {"thread_id": cid}})
            assert not snap.values
        assert len(await engine.ahistory(theirs)) == 1
        with sa.create_engine(engine._runtime.url.sync_url).connect() as conn:  # type: ignore[attr-defined]
            for table in ("ce_conversation", "ce_conversation_history", "ce_audit", "ce_audit_turn",
                          "ce_conversation_step", "ce_llm_call_log"):
                found = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE conversation_id IN "
                                             f"('{mine[0]}', '{mine[1]}')")).scalar()
                assert found == 0, table
            assert conn.execute(sa.text("SELECT count(*) FROM ce_conversation WHERE user_id = 'ana'")).scalar() == 0


async def test_forgetting_only_the_memory_keeps_conversations_but_not_the_values(db_url: str) -> None:
    async with engine_on(db_url, memory_pack(), tasks=TASKS) as engine:
        cid = (await engine.aprocess("a loan in french", user_id="ana")).conversation_id
        assert await engine.aforget_user("ana") == {"properties": 1, "conversations": 0}
        assert await engine.aproperties("ana") == {}
        assert len(await engine.ahistory(cid)) == 1
        fresh = await engine.aprocess("hello", str(uuid.uuid4()), user_id="ana")
        assert "language" not in fresh.context
