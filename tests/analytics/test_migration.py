"""Migration 0015 adds the turn stats columns and the time indexes to a database of 0014 whose steps
table lacks them; its older turns count as turns (their other numbers are empty, not invented); a
downgrade takes them away again. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.db.models import STEP_STATS_COLUMNS
from convengine.engine import Engine

pytestmark = pytest.mark.asyncio
CID = "6f1c2a52-0d3e-4c39-9a55-3f4e0b8d2a71"


def _as_before_0015(url: str) -> None:
    """A 0014 database whose ce_conversation_step was created before the stats columns existed."""
    upgrade(parse_database_url(url), "0014")
    engine = create_sync_engine(parse_database_url(url))
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX IF EXISTS ix_ce_conversation_step_created_at"))
        conn.execute(sa.text("DROP INDEX IF EXISTS ix_ce_conversation_updated_at"))
        for name in STEP_STATS_COLUMNS:
            conn.execute(sa.text(f"ALTER TABLE ce_conversation_step DROP COLUMN {name}"))
        now = datetime.now(UTC)
        conn.execute(sa.text("INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, "
                             "context_json, input_params_json, created_at, updated_at, lifecycle) VALUES "
                             "(:cid, 'RUNNING', 'LOAN', 'START', '{}', '{}', :now, :now, 'IN_PROGRESS')"),
                     {"cid": CID, "now": now})
        conn.execute(sa.text("INSERT INTO ce_conversation_step (conversation_id, turn_key, turn, undone, created_at) "
                             "VALUES (:cid, 't1', 1, :no, :now)"), {"cid": CID, "no": False, "now": now})
    engine.dispose()


def _shape(url: str) -> tuple[set[str], set[str]]:
    engine = create_sync_engine(parse_database_url(url))
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        columns = {c["name"] for c in inspector.get_columns("ce_conversation_step")}
        indexes = {i["name"] for t in ("ce_conversation_step", "ce_conversation") for i in inspector.get_indexes(t)}
    engine.dispose()
    return columns, {str(i) for i in indexes}


async def test_0015_adds_the_columns_and_indexes_and_older_turns_count_as_turns(empty_db_url: str) -> None:
    _as_before_0015(empty_db_url)
    upgrade(parse_database_url(empty_db_url))
    columns, indexes = _shape(empty_db_url)
    assert set(STEP_STATS_COLUMNS) <= columns
    assert {"ix_ce_conversation_step_created_at", "ix_ce_conversation_updated_at"} <= indexes
    async with await Engine.aopen(empty_db_url) as engine:
        total = (await engine.astats()).total
    assert (total.conversations, total.turns, total.llm_calls, total.fallback_turns, total.estimated_cost) == (1, 1, 0, 0, 0)


async def test_0015_downgrades(empty_db_url: str) -> None:
    from alembic import command

    from convengine.db.migrate import alembic_config

    upgrade(parse_database_url(empty_db_url))
    engine = create_sync_engine(parse_database_url(empty_db_url))
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0014")
    engine.dispose()
    columns, indexes = _shape(empty_db_url)
    assert not set(STEP_STATS_COLUMNS) & columns and "ix_ce_conversation_step_created_at" not in indexes
