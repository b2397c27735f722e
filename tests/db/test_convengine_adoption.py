"""Adopting a ConvEngine database (its first ``db upgrade``), as docs/deployment.md describes it:
templates render a null variable empty as ConvEngine did, each dropped NOT NULL is named with why (or
kept for a Java ConvEngine still sharing the database), and ConvEngine tables convengine does not
support are named wherever their rows are left out."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from convengine import Engine, PackError, validate_pack
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.config_loader import export_pack, import_pack
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.db.generations import RELAXED_COLUMNS
from tests.db.convengine_generations import create, generation

ROOT = Path(__file__).parents[2]
GREETING = "Hello [[${customerName}]], how can I help?"
PACK_WITH_OPEN_SCOPE = {  # a convengine pack whose rule leaves intent_code and state_code empty (any)
    "ce_intent": [{"intent_code": "GREETING", "description": "Greet the user"}],
    "ce_intent_classifier": [{"intent_code": "GREETING", "rule_type": "REGEX", "pattern": "(?i)hello", "priority": 1}],
    "ce_rule": [{"rule_type": "REGEX", "match_pattern": "(?i)vip", "action": "SET_INPUT_PARAM",
                 "action_value": "vip:true"}],
    "ce_response": [{"intent_code": "GREETING", "state_code": "ANY", "exact_text": "Hi!"}],
}


@pytest.fixture
def convengine_db(empty_db_url: str) -> Iterator[str]:
    """A ConvEngine 2.0.2x database: a greeting whose template shows a variable nobody sets, and two
    rows of a ConvEngine semantic-query table."""
    engine = create_sync_engine(parse_database_url(empty_db_url))
    with engine.begin() as conn:
        create(conn, generation("2.0.20"))
        conn.exec_driver_sql("CREATE TABLE ce_semantic_concept (concept_id int primary key, concept_key text not null)")
        conn.exec_driver_sql("INSERT INTO ce_semantic_concept VALUES (1, 'order'), (2, 'refund')")
        conn.execute(sa.text("INSERT INTO ce_intent (intent_code, description) VALUES ('GREETING', 'Greet the user')"))
        conn.execute(sa.text("INSERT INTO ce_intent_classifier (intent_code, rule_type, pattern, priority) "
                             "VALUES ('GREETING', 'REGEX', '(?i)hello', 1)"))
        conn.execute(sa.text("INSERT INTO ce_response (intent_code, state_code, output_format, response_type, "
                             "exact_text) VALUES ('GREETING', 'ANY', 'TEXT', 'EXACT', :text)"), {"text": GREETING})
    engine.dispose()
    yield empty_db_url


def _settings_rows(url: str) -> list[tuple[str, str]]:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(  # type: ignore[misc]
                "SELECT config_key, config_value FROM ce_config WHERE config_type = 'EngineSettings'"))]
    finally:
        engine.dispose()


def test_an_adopted_database_renders_a_null_variable_empty_as_convengine_did(convengine_db: str) -> None:
    changes = upgrade(parse_database_url(convengine_db))
    assert any("template_strict = false" in c for c in changes), changes
    assert _settings_rows(convengine_db) == [("template_strict", "false")]
    engine = Engine.open(convengine_db)
    try:
        assert engine.process("hello").payload.value == "Hello , how can I help?"
    finally:
        engine.close()
    strict = Engine.open(convengine_db, template_strict=True)  # the operator's setting wins
    try:
        with pytest.raises(ConvEngineError) as failed:
            strict.process("hello")
        assert failed.value.code == ErrorCode.UNRESOLVED_PROMPT_VARIABLE
    finally:
        strict.close()
    assert upgrade(parse_database_url(convengine_db)) == []  # adopted once: nothing more is written
    assert _settings_rows(convengine_db) == [("template_strict", "false")]


def test_a_database_convengine_made_keeps_strict_rendering(db_url: str) -> None:
    engine = Engine.open(db_url, pack={**PACK_WITH_OPEN_SCOPE, "ce_response": [
        {"intent_code": "GREETING", "state_code": "ANY", "exact_text": GREETING}]})
    try:
        with pytest.raises(ConvEngineError) as failed:
            engine.process("hello")
        assert failed.value.code == ErrorCode.UNRESOLVED_PROMPT_VARIABLE
        assert not [w for w in engine.warnings if "does not support" in w]  # its own tables are its own
    finally:
        engine.close()
    assert ("template_strict", "false") not in _settings_rows(db_url)


def test_convengine_constraints_can_be_kept_for_a_shared_database_and_relaxed_later(convengine_db: str) -> None:
    url = parse_database_url(convengine_db)
    kept = upgrade(url, convengine_constraints="keep")
    assert any(c.startswith("ce_rule: NOT NULL kept on intent_code, state_code") for c in kept), kept
    sync = create_sync_engine(url)
    try:
        with pytest.raises(PackError, match="intent_code"):
            import_pack(sync, PACK_WITH_OPEN_SCOPE)
        assert export_pack(sync)["ce_response"][0]["exact_text"] == GREETING  # nothing was written
        relaxed = upgrade(url, convengine_constraints="relax")
        rule = next(c for c in relaxed if c.startswith("ce_rule: NOT NULL dropped from intent_code, state_code"))
        assert "a blank scope means any intent" in rule
        import_pack(sync, PACK_WITH_OPEN_SCOPE)
        assert export_pack(sync)["ce_rule"][0].get("intent_code") is None
    finally:
        sync.dispose()


def test_every_relaxed_constraint_is_documented_with_why(convengine_db: str) -> None:
    changes = upgrade(parse_database_url(convengine_db))
    dropped = {f"{table}.{column}" for c in changes if (m := re.match(r"(\w+): NOT NULL dropped from ([\w, ]+) \(", c))
               for table in [m[1]] for column in m[2].split(", ")}
    assert "ce_rule.intent_code" in dropped
    assert dropped <= set(RELAXED_COLUMNS), dropped - set(RELAXED_COLUMNS)
    page = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| `(ce_\w+\.\w+)` \| (.+?) \|$", page, re.MULTILINE))
    assert documented == RELAXED_COLUMNS


def test_unsupported_convengine_tables_are_named_where_their_rows_are_left_out(convengine_db: str) -> None:
    upgrade(parse_database_url(convengine_db))
    engine = Engine.open(convengine_db)
    try:
        assert any("ce_semantic_concept (2 rows)" in w for w in engine.warnings), engine.warnings
    finally:
        engine.close()
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "pack", "export", "--url", convengine_db],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert "ce_semantic_concept (2 rows)" in done.stderr and "not used nor exported" in done.stderr
    assert "ce_semantic" not in done.stdout


def test_a_pack_with_unsupported_convengine_tables_validates_with_a_warning() -> None:
    snapshot = validate_pack({**PACK_WITH_OPEN_SCOPE, "ce_semantic_query": [{"query_id": 1}, {"query_id": 2}]})
    assert any("ce_semantic_query (2 rows)" in w for w in snapshot.warnings), snapshot.warnings
    with pytest.raises(PackError, match="ce_intnet"):  # a misspelt table is still an error
        validate_pack({**PACK_WITH_OPEN_SCOPE, "ce_intnet": []})
