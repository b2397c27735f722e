"""Workflows are rows like every other control table, on SQLite and PostgreSQL: exported and re-imported
unchanged (with their kind), versioned (a conversation keeps the workflow of the version it is pinned
to, a draft is tried before it is published), and migration 0013 adds ``ce_flow.kind`` to an older
database."""

from __future__ import annotations

import copy

import sqlalchemy as sa

from convengine.config_loader import dump_pack, export_pack, validate_pack
from convengine.config_loader.packs import load_yaml
from convengine.db import create_sync_engine, parse_database_url
from convengine.db.migrate import upgrade
from convengine.engine import Engine
from convengine.llm import ScriptedLLM
from tests.workflows.packs import support_pack

NO_INTENT = {"intent": None, "confidence": 0}


def workflow_rows(snapshot: object) -> tuple[set, set, set]:
    return ({(f.flow_code, f.kind) for f in snapshot.flows},  # type: ignore[attr-defined]
            {(n.flow_code, n.node_id, n.node_type, str(n.config)) for n in snapshot.flow_nodes},  # type: ignore[attr-defined]
            {(e.flow_code, e.from_node, e.to_node, e.outcome, e.condition) for e in snapshot.flow_edges})  # type: ignore[attr-defined]


def test_export_reimport_and_versions(db_url: str, sync_engine: sa.Engine) -> None:
    tools = {"orders.status": lambda args: {"id": "A1", "status": "late"}}
    with Engine.open(db_url, pack=support_pack(), llm=ScriptedLLM({}, default=NO_INTENT), tools=tools) as engine:
        exported = dump_pack(export_pack(sync_engine))
        assert "kind: workflow" in exported
        assert workflow_rows(validate_pack(load_yaml(exported, "export"))) == workflow_rows(engine.snapshot)

        pinned = engine.process("order A1?")
        assert pinned.text == "Order A1 is late.\nAnything else?"
        changed = copy.deepcopy(support_pack())
        next(n for n in changed["ce_flow_node"] if n["node_id"] == "late")["config"]["text"] = "A1: delayed, sorry."
        engine.versions.draft(changed, author="ann")
        assert engine.process("order A1?", draft=True).text == "A1: delayed, sorry.\nAnything else?"
        engine.versions.publish(author="ann")
        assert engine.process("order A1?", pinned.conversation_id).text == "Order A1 is late.\nAnything else?"
        assert engine.process("order A1?").text == "A1: delayed, sorry.\nAnything else?"


def test_migration_0013_adds_the_kind_column_to_an_older_database(empty_db_url: str) -> None:
    engine = create_sync_engine(parse_database_url(empty_db_url))
    try:
        upgrade(engine, "0011")
        with engine.begin() as conn:  # ce_flow as an older release created it
            conn.execute(sa.text("ALTER TABLE ce_flow DROP COLUMN kind"))
            conn.execute(sa.text("INSERT INTO ce_flow (flow_code, priority, enabled) VALUES ('OLD', 100, true)"))
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT flow_code, kind FROM ce_flow")).all() == [("OLD", "flow")]
    finally:
        engine.dispose()
