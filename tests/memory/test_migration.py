"""Migration 0007 adds only what a database lacks: the user and lifecycle columns, the undone mark
and the step table (both backends)."""

from __future__ import annotations

import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url, upgrade


def _columns(engine: sa.Engine, table: str) -> set[str]:
    with engine.connect() as conn:
        return {c["name"] for c in sa.inspect(conn).get_columns(table)}


def test_0007_adds_what_is_missing_and_keeps_rows(empty_db_url: str) -> None:
    url = parse_database_url(empty_db_url)
    upgrade(url, "0006")
    engine = create_sync_engine(url)
    with engine.begin() as conn:  # a database from before 0007 (0004 may have added some already)
        conn.execute(sa.text("DROP TABLE IF EXISTS ce_conversation_step"))
        for table, column in (("ce_conversation", "user_id"), ("ce_conversation", "lifecycle"),
                              ("ce_conversation_history", "undone")):
            if column in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
                conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        conn.execute(sa.text("INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, "
                             "context_json, input_params_json) VALUES ('00000000-0000-4000-8000-000000000001', "
                             "'RUNNING', 'FAQ', 'IDLE', '{}', '{}')"))
    upgrade(url)
    upgrade(url)  # idempotent
    assert {"user_id", "lifecycle"} <= _columns(engine, "ce_conversation")
    assert "undone" in _columns(engine, "ce_conversation_history")
    assert {"turn_key", "history_id", "side_effects_json", "properties_json", "undone"} <= _columns(
        engine, "ce_conversation_step")
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT intent_code, user_id, lifecycle FROM ce_conversation")).one()
    engine.dispose()
    assert tuple(row) == ("FAQ", None, None)
