"""A database built and filled by an older ConvEngine release is upgraded and keeps working."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from convengine import ConfigError, Engine
from convengine.config_loader import export_pack, import_pack
from convengine.db import create_sync_engine, parse_database_url
from tests.db.convengine_generations import create, generation

ROOT = Path(__file__).parents[2]
SUPPORT = ROOT / "examples" / "support_desk.yaml"
GENERATIONS = ("2.0.0", "2.0.5", "2.0.9", "2.0.20")
CID = str(uuid.UUID(int=20260505))


@pytest.fixture(params=GENERATIONS)
def convengine_db(request: pytest.FixtureRequest, empty_db_url: str) -> Iterator[tuple[str, str]]:
    """An empty database of the current backend, built and filled as ConvEngine ``release`` does."""
    release = str(request.param)
    engine = create_sync_engine(parse_database_url(empty_db_url))
    with engine.begin() as conn:
        create(conn, generation(release))
        _fill(conn, release)
    engine.dispose()
    yield empty_db_url, release


def _fill(conn: sa.Connection, release: str) -> None:
    json = "CAST({} AS jsonb)" if conn.dialect.name == "postgresql" else "{}"
    template_format = "output_format" if release == "2.0.20" else "response_type"
    statements = [
        ("INSERT INTO ce_intent (intent_code, description, priority) VALUES ('GREETING', 'Greet the user', 10), "
        "('ORDER_STATUS', 'Where an order is', 20)"),
        ("INSERT INTO ce_intent_classifier (intent_code, rule_type, pattern, priority, description) VALUES "
        "('GREETING', 'REGEX', :greeting, 10, 'greetings'), ('ORDER_STATUS', 'REGEX', :order, 20, 'order words')"),
        ("INSERT INTO ce_response (intent_code, state_code, output_format, response_type, exact_text) VALUES "
        "('GREETING', 'ANY', 'TEXT', 'EXACT', 'Hello! How can I help?'), "
        "('ORDER_STATUS', 'ANY', 'TEXT', 'EXACT', 'Your order is on its way.')"),
        (f"INSERT INTO ce_prompt_template (intent_code, state_code, {template_format}, system_prompt, user_prompt) "
        "VALUES ('ORDER_STATUS', 'ANY', 'TEXT', 'You help with orders.', :user_prompt)"),
        ("INSERT INTO ce_config (config_id, config_type, config_key, config_value) VALUES "
        "(1, 'IntentResolutionStep', 'STICKY_INTENT', 'true')"),
        ("INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, context_json, "
        f"input_params_json) VALUES (:cid, 'RUNNING', 'ORDER_STATUS', 'UNKNOWN', {json.format(':empty')}, "
        f"{json.format(':empty')})"),
    ]
    if release == "2.0.0":  # one history row per entry, as ConvEngine 2.0.0's audit service wrote them
        statements.append(
            "INSERT INTO ce_conversation_history (conversation_id, entry_type, role, stage, content_text, created_at) "
            "VALUES (:cid, 'USER_INPUT', 'USER', 'USER_INPUT', 'where is my order', :t0), "
            "(:cid, 'RESOLVE_RESPONSE_AI_RESPONSE', 'AI', 'ASSISTANT_OUTPUT', 'Your order is on its way.', :t1)")
    else:
        statements.append("INSERT INTO ce_conversation_history (conversation_id, user_input, assistant_output) "
                          f"VALUES (:cid, 'where is my order', {json.format(':answer')})")
    values = {"greeting": r"(?i)\b(hi|hello)\b", "order": r"(?i)\border\b", "user_prompt": "User: {{user_input}}",
              "cid": CID, "empty": "{}", "answer": '{"type": "TEXT", "value": "Your order is on its way."}',
              "t0": datetime(2026, 1, 5, 10, 0, 0, tzinfo=UTC), "t1": datetime(2026, 1, 5, 10, 0, 1, tzinfo=UTC)}
    for statement in statements:
        text = sa.text(statement)
        conn.execute(text, {k: v for k, v in values.items() if f":{k}" in statement})


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], check=False, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_an_old_schema_is_named_with_the_command_that_fixes_it(convengine_db: tuple[str, str]) -> None:
    url, release = convengine_db
    with pytest.raises(ConfigError) as caught:
        Engine.open(url, auto_migrate=False)
    assert caught.value.code.value == "SCHEMA_OUTDATED"
    assert "convengine db upgrade" in caught.value.message
    missing = caught.value.details["missing"]
    assert "ce_conversation.owner_id" in missing and "ce_state_graph" in missing
    if release != "2.0.20":
        assert "ce_prompt_template.output_format" in missing


def test_db_upgrade_brings_every_generation_to_the_current_schema(convengine_db: tuple[str, str]) -> None:
    url, release = convengine_db
    done = _cli("db", "upgrade", "--url", url)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    expected = {
        "2.0.0": ["ce_prompt_template.response_type renamed to output_format",
                  "ce_conversation_history: 1 turns converted", "ce_intent_classifier.state_code added"],
        "2.0.5": ["ce_prompt_template.response_type renamed to output_format", "ce_intent_classifier.state_code added",
                  "ce_prompt_template.interaction_mode added", "ce_output_schema.schema_type added"],
        "2.0.9": ["ce_prompt_template.response_type renamed to output_format", "ce_output_schema.schema_type added"],
        "2.0.20": ["ce_rule: NOT NULL dropped from intent_code, state_code"],
    }[release]
    for change in expected:
        assert change in done.stdout, (change, done.stdout)
    again = _cli("db", "upgrade", "--url", url)
    assert again.returncode == 0 and "upgraded:" not in again.stdout, again.stdout

    engine = create_sync_engine(parse_database_url(url))
    try:
        pack = export_pack(engine)
        template = pack["ce_prompt_template"][0]
        assert (template["intent_code"], template["output_format"]) == ("ORDER_STATUS", "TEXT")
        assert {c["state_code"] for c in pack["ce_intent_classifier"]} == {"UNKNOWN"}
        if release == "2.0.0":
            legacy = sa.inspect(engine).get_columns("ce_conversation_history_legacy")
            assert "entry_type" in {c["name"] for c in legacy}
    finally:
        engine.dispose()


def test_an_upgraded_conversation_continues_and_a_convengine_pack_imports(convengine_db: tuple[str, str]) -> None:
    url, _release = convengine_db
    assert _cli("db", "upgrade", "--url", url).returncode == 0
    engine = Engine.open(url)
    try:
        result = engine.process("hello", CID)
        assert (result.intent, result.turn, result.payload.value) == ("GREETING", 2, "Hello! How can I help?")
        history = engine.history(CID)
        assert [h["user_input"] for h in history] == ["where is my order", "hello"]
        fresh = engine.process("where is my order")
        assert fresh.payload.value == "Your order is on its way."
    finally:
        engine.close()
    # convengine's own packs leave scope columns empty where ConvEngine's DDL said NOT NULL
    sync = create_sync_engine(parse_database_url(url))
    try:
        snapshot = import_pack(sync, SUPPORT)
        assert snapshot.tables()["ce_rule"]
    finally:
        sync.dispose()
