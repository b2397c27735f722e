"""Packs in and out of a real database: unchanged ConvEngine rows, round trips, atomic imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from convengine.catalog.errors import ConfigValidationError, PackError
from convengine.config_loader import (
    SnapshotHolder,
    dump_pack,
    export_pack,
    import_pack,
    load_snapshot,
    validate_pack,
)
from tests.conftest import PACKS

CONVENGINE_PACK = PACKS / "convengine_shaped.yaml"


def count_rows(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def test_convengine_shaped_rows_import_unchanged(sync_engine: sa.Engine) -> None:
    import_pack(sync_engine, CONVENGINE_PACK)
    with sync_engine.connect() as conn:
        rule = conn.execute(sa.text("SELECT phase, rule_type, action_value FROM ce_rule WHERE rule_id = 501")).one()
        tool = conn.execute(sa.text("SELECT tool_group FROM ce_mcp_tool WHERE tool_id = 902")).scalar_one()
        contract = conn.execute(sa.text(
            "SELECT interaction_contract FROM ce_prompt_template WHERE template_id = 301")).scalar_one()
    assert tuple(rule) == ("POST_AGENT_INTENT", "EXACT", "ELIGIBILITY_GATE")
    assert tool == "API"  # stored as written; the snapshot resolves the alias
    assert contract == '{"allows":["reset"],"expects":["structured_input"]}'
    snapshot = load_snapshot(sync_engine)
    assert snapshot.tool("loan.credit.rating.check").group == "HTTP_API"  # type: ignore[union-attr]
    assert [r.rule_id for r in snapshot.rules_for("POST_AGENT_INTENT")] == [501, 505]
    assert [r.rule_id for r in snapshot.rules_for("POST_CLASSIFIER_INTENT")] == [504]
    assert snapshot.settings.mcp.tool_max_loops == 4  # ce_config McpToolStep.MCP_TOOL_MAX_LOOPS
    assert snapshot.component_float("AgentIntentResolver", "MIN_CONFIDENCE", 0.0) == 0.55


def test_import_export_import_gives_equal_snapshots(sync_engine: sa.Engine, tmp_path: Path) -> None:
    first = import_pack(sync_engine, CONVENGINE_PACK)
    exported = tmp_path / "exported.yaml"
    exported.write_text(dump_pack(export_pack(sync_engine)), encoding="utf-8")
    second = import_pack(sync_engine, exported)
    assert second == first
    assert load_snapshot(sync_engine) == first
    assert second.version == first.version


def test_reimporting_replaces_rather_than_duplicates(sync_engine: sa.Engine) -> None:
    pack = {"ce_intent": [{"intent_code": "A", "description": "a"}],
            "ce_rule": [{"intent_code": "A", "state_code": "S", "rule_type": "EXACT", "match_pattern": "x",
                         "action": "SET_INPUT_PARAM", "action_value": "k"}] * 2}
    import_pack(sync_engine, pack)
    import_pack(sync_engine, pack)
    assert count_rows(sync_engine, "ce_rule") == 2
    assert count_rows(sync_engine, "ce_intent") == 1


def test_settings_round_trip_through_the_database(sync_engine: sa.Engine) -> None:
    pack = {"settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"},
                                  "state-graph": {"allowed-transitions": {"COLLECT": ["CONFIRM"]}}}}}
    import_pack(sync_engine, pack)
    snapshot = load_snapshot(sync_engine)
    assert snapshot.settings.flow.dialogue_act.resolute == "REGEX_ONLY"
    assert snapshot.settings.flow.state_graph.allowed_transitions == {"COLLECT": ["CONFIRM"]}
    assert export_pack(sync_engine)["settings"]["flow"]["dialogue-act"]["resolute"] == "REGEX_ONLY"


def test_an_invalid_pack_writes_nothing(sync_engine: sa.Engine) -> None:
    import_pack(sync_engine, CONVENGINE_PACK)
    with pytest.raises(ConfigValidationError):
        import_pack(sync_engine, {"ce_policy": [{"rule_type": "REGEX", "pattern": "(", "response_text": "x"}]})
    assert count_rows(sync_engine, "ce_policy") == 2


def test_an_import_that_fails_halfway_leaves_the_database_as_it_was(sync_engine: sa.Engine) -> None:
    import_pack(sync_engine, CONVENGINE_PACK)
    before = export_pack(sync_engine)
    # The database refuses ce_rule rows mid-import (after the deletes and earlier tables' inserts).
    with sync_engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(sa.text("CREATE TRIGGER no_rules BEFORE INSERT ON ce_rule "
                                 "BEGIN SELECT RAISE(ABORT, 'rules are frozen'); END"))
        else:
            conn.execute(sa.text("CREATE FUNCTION no_rules() RETURNS trigger AS $$ BEGIN "
                                 "RAISE EXCEPTION 'rules are frozen'; END $$ LANGUAGE plpgsql"))
            conn.execute(sa.text("CREATE TRIGGER no_rules BEFORE INSERT ON ce_rule "
                                 "FOR EACH ROW EXECUTE FUNCTION no_rules()"))
    replacement = yaml.safe_load(CONVENGINE_PACK.read_text())
    replacement["ce_intent"].append({"intent_code": "EXTRA", "description": "new"})
    with pytest.raises(PackError, match="nothing was written.*rules are frozen"):
        import_pack(sync_engine, replacement)
    assert export_pack(sync_engine) == before


def test_reload_swaps_and_a_bad_reload_keeps_the_previous_snapshot(sync_engine: sa.Engine) -> None:
    import_pack(sync_engine, CONVENGINE_PACK)
    holder = SnapshotHolder(sync_engine)
    good = holder.reload()
    with sync_engine.begin() as conn:
        conn.execute(sa.text("UPDATE ce_policy SET pattern = '(' WHERE policy_id = 601"))
    with pytest.raises(ConfigValidationError, match=r"ce_policy\[601\]\.pattern"):
        holder.reload()
    assert holder.current is good
    assert holder.reload(raise_on_error=False) is good
    assert "ce_policy[601]" in str(holder.last_error)
    with sync_engine.begin() as conn:
        conn.execute(sa.text("UPDATE ce_policy SET pattern = 'ssn' WHERE policy_id = 601"))
        conn.execute(sa.text("UPDATE ce_config SET config_value = '2' WHERE config_id = 5"))
    fresh = holder.reload()
    assert fresh is holder.current and fresh is not good
    assert fresh.settings.mcp.tool_max_loops == 2  # ce_config overrides apply on reload too


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)  # the tests assert the exit code


def test_cli_import_export_validate(db_url: str, tmp_path: Path) -> None:
    done = run_cli("pack", "validate", str(CONVENGINE_PACK))
    assert done.returncode == 0, done.stderr
    assert "valid (36 rows" in done.stdout
    done = run_cli("pack", "import", str(CONVENGINE_PACK), "--url", db_url)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out.yaml"
    done = run_cli("pack", "export", "--url", db_url, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert validate_pack(out) == validate_pack(CONVENGINE_PACK)
    done = run_cli("pack", "export", "--url", db_url)
    assert yaml.safe_load(done.stdout) == yaml.safe_load(out.read_text())


def test_cli_reports_every_violation_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({
        "ce_policy": [{"policy_id": 1, "rule_type": "REGEX", "pattern": "(", "response_text": "x"}],
        "ce_rule": [{"rule_id": 2, "rule_type": "EXACT", "match_pattern": "x", "action": "JUMP"}],
    }))
    done = run_cli("pack", "validate", str(bad))
    assert done.returncode == 2  # an invalid configuration: exit code 2, one line per violation
    assert "ce_policy[1].pattern" in done.stderr and "ce_rule[2].action" in done.stderr


def test_cli_db_upgrade_is_idempotent(empty_db_url: str) -> None:
    for _ in range(2):
        done = run_cli("db", "upgrade", "--url", empty_db_url)
        assert done.returncode == 0, done.stderr
        assert "up to date" in done.stdout
