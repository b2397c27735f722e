"""Migration 0010: long-term properties stored before users were scoped to their caller stay readable.

Before it, every caller's user "alice" shared one namespace. After it, each owner whose conversations
named alice has her values, host code keeps them only when a conversation without owner names her,
and a user no conversation names keeps hers untouched (both backends).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.memory.longterm import namespace
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio
MEMORY_PACK = pack(settings={"conversation_memory": {"long_term": ["language"]}})


def _legacy_row(conn: sa.Connection, store: sa.Table, user_id: str, value: str) -> None:
    stored: Any = {"value": value}
    conn.execute(store.insert().values(prefix=".".join(namespace(user_id)), key="language",
                                       value=stored if conn.dialect.name == "postgresql" else json.dumps(stored)))


async def test_0010_gives_each_owner_the_users_it_named(db_url: str) -> None:
    async with engine_on(db_url, MEMORY_PACK) as engine:
        await engine.aproperties("nobody")  # sets the store's tables up
        for owner, user in ((None, "alice"), ("key:a", "alice"), ("key:b", "alice"), ("key:a", "bob")):
            await engine.aprocess("hello", user_id=user, owner=owner)
    url = parse_database_url(db_url)
    sync = create_sync_engine(url)
    try:
        with sync.begin() as conn:  # the store as a release before 0010 left it
            store = sa.Table("store", sa.MetaData(), autoload_with=conn)
            conn.execute(store.delete())
            for user, value in (("alice", "fr"), ("bob", "it"), ("carol", "pt")):
                _legacy_row(conn, store, user, value)
            conn.execute(sa.text("UPDATE convengine_alembic_version SET version_num = '0009'"))
        upgrade(url)
        upgrade(url)  # idempotent
    finally:
        sync.dispose()
    async with engine_on(db_url, MEMORY_PACK) as engine:
        assert await engine.aproperties("alice", owner="key:a") == {"language": "fr"}
        assert await engine.aproperties("alice", owner="key:b") == {"language": "fr"}
        assert await engine.aproperties("alice") == {"language": "fr"}  # a host conversation names her
        assert await engine.aproperties("bob", owner="key:a") == {"language": "it"}
        assert await engine.aproperties("bob") == {}  # only key:a named bob: moved, not copied
        assert await engine.aproperties("bob", owner="key:b") == {}
        assert await engine.aproperties("carol") == {"language": "pt"}  # named by no conversation
        # and each copy is its owner's own from now on
        await engine.aforget_user("alice", owner="key:b")
        assert await engine.aproperties("alice", owner="key:a") == {"language": "fr"}
        assert await engine.aproperties("alice", owner="key:b") == {}
