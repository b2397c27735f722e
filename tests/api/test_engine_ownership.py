"""Conversation ownership in the Python API (what the HTTP API builds on), and its migration."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConversationNotFoundError, InvalidInputError
from convengine.db import create_sync_engine, parse_database_url, upgrade
from tests.helpers import engine_on, pack
from tests.security.world import World, assert_unchanged


async def test_a_conversation_belongs_to_the_owner_of_its_first_turn(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("a loan", owner="alice")).conversation_id
        assert (await engine.aprocess("hello", cid, owner="alice")).intent == "GREETING"
        before = World.capture(db_url)
        for attempt in (engine.aprocess("hello", cid, owner="mallory"),
                        engine.aprocess("hello", cid, reset=True, owner="mallory"),
                        engine.aaudit(cid, owner="mallory"), engine.atrace(cid, owner="mallory"),
                        engine.ahistory(cid, owner="mallory"), engine.astate(cid, owner="mallory"),
                        engine.acheck_access(cid, owner="mallory")):
            with pytest.raises(ConversationNotFoundError, match=f"no conversation {cid}"):
                await attempt
        assert_unchanged(before, World.capture(db_url))
        assert [h["user_input"] for h in await engine.ahistory(cid, owner="alice")] == ["a loan", "hello"]
        assert len(await engine.aaudit(cid)) == len(await engine.aaudit(cid, owner="alice"))  # host code: any
        assert await engine.acheck_access(cid, "alice") and not await engine.acheck_access(str(uuid.uuid4()), "x")


async def test_conversations_of_host_code_have_no_owner(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("a loan")).conversation_id
        with pytest.raises(ConversationNotFoundError):
            await engine.aaudit(cid, owner="alice")
        with pytest.raises(ConversationNotFoundError):
            await engine.aprocess("hello", cid, owner="alice")
        assert (await engine.aprocess("hello", cid)).intent == "GREETING"


async def test_two_owners_racing_for_a_new_id_one_wins(db_url: str) -> None:
    cid = str(uuid.uuid4())
    async with engine_on(db_url, pack()) as engine:
        results = await asyncio.gather(*(engine.aprocess("hello", cid, owner=o) for o in ("alice", "bob")),
                                       return_exceptions=True)
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], ConversationNotFoundError)
        assert len(await engine.ahistory(cid)) == 1


@pytest.mark.parametrize("owner", ["", 42, "x" * 201])
async def test_a_bad_owner_is_refused(sqlite_engine: object, owner: object) -> None:
    with pytest.raises(InvalidInputError, match="owner must be a non-empty string"):
        await asyncio.to_thread(sqlite_engine.process, "hello", None, None, False, owner=owner)  # type: ignore[attr-defined]


def test_the_owner_column_is_added_to_a_conversation_table_made_by_convengine(empty_db_url: str) -> None:
    url = parse_database_url(empty_db_url)
    engine = create_sync_engine(url)
    cid = str(uuid.uuid4())
    id_type = "uuid" if url.is_postgres else "varchar(36)"
    with engine.begin() as conn:  # ConvEngine's DDL: no owner_id
        conn.execute(sa.text(f"CREATE TABLE ce_conversation (conversation_id {id_type} PRIMARY KEY, status text "
                             "NOT NULL, intent_code text NOT NULL, state_code text NOT NULL, context_json text NOT "
                             "NULL, last_user_text text, last_assistant_json text, input_params_json text NOT NULL, "
                             "created_at timestamp, updated_at timestamp)"))
        conn.execute(sa.text("INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, "
                             "context_json, input_params_json) VALUES (:c, 'RUNNING', 'FAQ', 'IDLE', '{}', '{}')"),
                     {"c": cid})
    upgrade(url)
    upgrade(url)  # idempotent
    with engine.connect() as conn:
        columns = [c["name"] for c in sa.inspect(conn).get_columns("ce_conversation")]
        row = conn.execute(sa.text("SELECT intent_code, owner_id FROM ce_conversation")).one()
    engine.dispose()
    assert "owner_id" in columns and tuple(row) == ("FAQ", None)
