"""The CLI's front door: a command that cannot reach its database or load its configuration says
why in one line and exits with code 2 (the traceback only with --debug); chat's commands; pack
validate keeps row labels; pack export of a missing file writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLES, PG_URL

ROOT = Path(__file__).resolve().parents[2]
DOWN = "postgresql://postgres@127.0.0.1:1/nothing"  # nothing listens on port 1


def cli(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("CONVENGINE_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env, check=False)


def assert_one_line(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", [
    ["db", "upgrade", "--url", DOWN],
    ["pack", "import", str(EXAMPLES / "support_desk.yaml"), "--url", DOWN],
    ["pack", "export", "--url", DOWN],
    ["chat", "--url", DOWN],
    ["serve", "--url", DOWN, "--port", "1"],
    ["test", str(EXAMPLES / "support_desk.conv.yaml"), "--url", DOWN],
])
def test_a_database_that_is_down_is_one_line_and_exit_code_2(command: list[str]) -> None:
    assert_one_line(cli(*command), "error [DATABASE_UNAVAILABLE]", "Connection refused")


def test_a_refused_role_is_one_line_naming_the_role() -> None:
    if not PG_URL:
        pytest.skip("PostgreSQL not configured (set CONVENGINE_TEST_PG_URL)")
    from convengine.db import parse_database_url

    url = parse_database_url(PG_URL).sync_url
    refused = f"postgresql://no_such_role_x@{url.host}:{url.port or 5432}/postgres"
    assert_one_line(cli("db", "upgrade", "--url", refused), "DATABASE_UNAVAILABLE", "no_such_role_x")


def test_debug_shows_the_traceback() -> None:
    done = cli("--debug", "db", "upgrade", "--url", DOWN)
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_configuration_failures_are_one_line_too(tmp_path: Path) -> None:
    assert_one_line(cli("pack", "validate", str(tmp_path / "missing.yaml")), "PACK_INVALID", "not found")
    assert_one_line(cli("db", "upgrade", "--url", "mysql://somewhere/db"), "unsupported database URL")


def test_export_of_a_missing_sqlite_file_writes_nothing(tmp_path: Path) -> None:
    database, output = tmp_path / "missing.db", tmp_path / "pack.yaml"
    done = cli("pack", "export", "--url", f"sqlite:///{database}", "-o", str(output))
    assert_one_line(done, "DATABASE_UNAVAILABLE", "no database at")
    assert not database.exists() and not output.exists()


def test_export_of_a_database_without_tables_says_to_upgrade(tmp_path: Path) -> None:
    database = tmp_path / "empty.db"
    database.touch()
    assert_one_line(cli("pack", "export", "--url", f"sqlite:///{database}"), "convengine db upgrade")


def test_validate_keeps_row_labels_and_lists_warnings(tmp_path: Path) -> None:
    pack = tmp_path / "p.yaml"
    pack.write_text(yaml.safe_dump({
        "ce_intent": [{"intent_code": "A", "description": "a"}],
        "ce_rule": [
            {"intent_code": "A", "state_code": "ANY", "rule_type": "EXACT", "match_pattern": "x",
             "action": "SET_INPUT_PARAM", "action_value": "k"},
            {"intent_code": "A", "state_code": "ANY", "rule_type": "REGEX", "match_pattern": "(",
             "action": "SET_INPUT_PARAM", "action_value": "k"}],
        "ce_response": [{"intent_code": "A", "state_code": "ANY", "exact_text": "hi"}],
    }))
    done = cli("pack", "validate", str(pack))
    assert done.returncode == 2
    assert "ce_rule[#2 (row 2, no rule_id)].match_pattern: does not compile" in done.stderr

    data = yaml.safe_load(pack.read_text())
    data["ce_rule"].pop()
    data["ce_pending_action"] = [{"intent_code": "A", "state_code": "ANY", "action_key": "GO", "bean_name": "goTasks",
                                  "method_names": "go"}]
    data["ce_response"][0]["exact_text"] = "hi {{nobody}}"
    pack.write_text(yaml.safe_dump(data))
    done = cli("pack", "validate", str(pack))
    assert done.returncode == 0, done.stderr
    assert "'nobody' is not provided" in done.stderr
    assert "calls task goTasks:go, which the host has not registered" in done.stderr

    (tmp_path / "p_tasks.py").write_text("TASKS = {'goTasks': {'go': lambda task: None}}\n")
    assert "goTasks" not in cli("pack", "validate", str(pack)).stderr  # the companion tasks file is used


def test_chat_help_shows_flags_as_flags() -> None:
    done = cli("chat", "--help")
    assert done.returncode == 0
    trace = next(line for line in done.stdout.splitlines() if "--trace" in line)
    assert "<bool>" not in trace and "Show each turn's step trace" in trace


def test_chat_commands_help_trace_and_reset(tmp_path: Path) -> None:
    done = cli("chat", "--url", f"sqlite:///{tmp_path / 'c.db'}",
               stdin="/help\nhello\n/trace\nwhere is my order\n/trace\n/reset\nhelp\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "/trace" in out and "start the conversation over" in out          # /help lists the commands
    assert out.count("load_or_create_conversation") == 1                     # traced exactly one turn
    assert "Let's start over" in out and "UNKNOWN / RESTARTED" in out         # /reset
    assert "I can tell you where your order is" in out                       # the pack's help answer
