"""Every CLI command prints stored and user text inertly: no markup, no terminal escape sequences.

Attack (failed before the fix): a document heading ``# Refund [/] policy`` made ``convengine
knowledge search`` crash with Rich's MarkupError, and ``ESC[2J`` (clear screen), ``ESC]0;...BEL``
(window title) in a passage, a chat reply, a version's author or message, a test's name or reply, or
an error message about a file name reached the operator's terminal as they were.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "[/] [bold]x[/bold] \x1b[2J\x1b]0;owned\x07 \u202eright-to-left"
SHOWN = "\\x1b[2J\\x1b]0;owned\\x07 \\u202eright-to-left"
ECHO_PACK = {
    "ce_intent": [{"intent_code": "ECHO", "description": "echo"}],
    "ce_intent_classifier": [{"intent_code": "ECHO", "rule_type": "REGEX", "pattern": ".*", "priority": 1}],
    "ce_response": [{"response_id": 1, "intent_code": "ECHO", "state_code": "UNKNOWN", "response_type": "EXACT",
                     "exact_text": "You said: {{user_input}}"}],
}


def cli(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    env.pop("CONVENGINE_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=180, cwd=cwd, env=env, check=False)


def assert_inert(done: subprocess.CompletedProcess[str], *shown: str) -> str:
    printed = done.stdout + done.stderr
    assert "MarkupError" not in printed and "Traceback" not in printed, printed
    assert not any(c in printed for c in "\x1b\x07\u202e"), printed
    for text in shown:
        assert text in printed, printed
    return printed


def test_knowledge_commands_print_documents_inertly(db_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "refund.md").write_text(f"# Refund [/] policy\n\nRefunds take five days. {HOSTILE}\n")
    (docs / "evil\x1b[2J[bold].md").write_text("# Evil\n\nRefunds again.\n")
    done = cli("knowledge", "ingest", "faq", str(docs), "--url", db_url, "--description", HOSTILE)
    assert done.returncode == 0, done.stderr
    assert_inert(done, "2 added")
    done = cli("knowledge", "search", "faq", "refunds policy", "--url", db_url)
    assert done.returncode == 0, done.stderr
    assert_inert(done, "Refund [/] policy", SHOWN, "evil\\x1b[2J[bold].md")
    done = cli("knowledge", "list", "--url", db_url)
    assert done.returncode == 0, done.stderr
    assert_inert(done, "[/] [bold]x[/bold]")


def test_chat_prints_replies_trace_and_errors_inertly(db_url: str, tmp_path: Path) -> None:
    pack = tmp_path / "echo.yaml"
    pack.write_text(yaml.safe_dump(ECHO_PACK))
    done = cli("chat", "--url", db_url, "--pack", str(pack), "--llm", "none", "--trace", stdin=f"hello {HOSTILE}\n")
    assert done.returncode == 0, done.stderr
    printed = assert_inert(done, f"You said: hello [/] [bold]x[/bold] {SHOWN}", "ECHO / UNKNOWN")
    assert printed.count(SHOWN) == 2  # the echoed message and the reply


def test_version_commands_print_authors_messages_and_diffs_inertly(db_url: str, tmp_path: Path) -> None:
    first, second = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    first.write_text(yaml.safe_dump(ECHO_PACK))
    changed = {**ECHO_PACK, "ce_intent": [{"intent_code": "ECHO", "description": HOSTILE}]}
    second.write_text(yaml.safe_dump(changed))
    assert cli("pack", "import", str(first), "--url", db_url).returncode == 0
    done = cli("pack", "draft", str(second), "--url", db_url, "--author", HOSTILE, "-m", HOSTILE)
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    done = cli("pack", "versions", "--url", db_url)
    assert done.returncode == 0, done.stderr
    assert_inert(done, f"{HOSTILE[:19]}{SHOWN}: {HOSTILE[:19]}{SHOWN}")  # author: message
    done = cli("pack", "diff", "production", "draft", "--url", db_url)
    assert done.returncode == 0, done.stderr
    assert_inert(done, SHOWN)


def test_errors_and_the_test_runner_print_inertly(tmp_path: Path) -> None:
    done = cli("pack", "validate", str(tmp_path / f"missing {HOSTILE}.yaml"))
    assert done.returncode == 2
    assert_inert(done, "error", SHOWN)
    (tmp_path / "echo.yaml").write_text(yaml.safe_dump(ECHO_PACK))
    spec = {"pack": "echo.yaml", "tests": [{"name": f"name {HOSTILE}", "turns": [
        {"user": f"hello {HOSTILE}", "expect": {"payload": "something else"}}]}]}
    (tmp_path / "echo.conv.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    done = cli("test", str(tmp_path / "echo.conv.yaml"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert_inert(done, "FAIL", f"name [/] [bold]x[/bold] {SHOWN}", "You said: hello")


@pytest.mark.parametrize("text", ["plain", "tab\there", "new\nline", "é 日本 👨‍👩‍👧"])
def test_ordinary_text_is_printed_as_it_is(text: str) -> None:
    from convengine.security.terminal import visible

    assert visible(text) == text
