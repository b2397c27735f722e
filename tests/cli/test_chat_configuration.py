"""``convengine chat`` never replaces a database's configuration unless asked to (--replace)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url

ROOT = Path(__file__).parents[2]
SUPPORT, LOAN = ROOT / "examples" / "support_desk.yaml", ROOT / "examples" / "loan_application.yaml"


def chat(url: str, *args: str, stdin: str = "hello\n") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", "chat", "--url", url, "--llm", "none", *args],
                          input=stdin, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)


def intents(url: str) -> list[str]:
    engine = create_sync_engine(parse_database_url(url))
    with engine.connect() as conn:
        found = [r[0] for r in conn.execute(sa.text("SELECT intent_code FROM ce_intent ORDER BY intent_code"))]
    engine.dispose()
    return found


def test_an_empty_database_gets_the_bundled_pack_and_keeps_it(db_url: str) -> None:
    first = chat(db_url)
    assert first.returncode == 0, first.stderr
    assert "GREETING / IDLE" in first.stdout
    stored = intents(db_url)
    again = chat(db_url)  # the README's first command, run a second time
    assert again.returncode == 0, again.stderr
    assert intents(db_url) == stored and "CANCEL_ORDER" in stored


def test_a_different_pack_is_refused_without_replace_and_nothing_changes(db_url: str) -> None:
    assert chat(db_url, "--pack", str(SUPPORT)).returncode == 0
    before = intents(db_url)
    refused = chat(db_url, "--pack", str(LOAN))
    assert refused.returncode != 0
    message = " ".join((refused.stdout + refused.stderr).split())
    assert "already holds a different configuration" in message and "--replace" in message
    assert "ce_intent (" in message  # names what would be replaced, with row counts
    assert intents(db_url) == before


def test_replace_imports_the_other_pack(db_url: str) -> None:
    assert chat(db_url, "--pack", str(SUPPORT)).returncode == 0
    replaced = chat(db_url, "--pack", str(LOAN), "--replace", "--scripted",
                    str(ROOT / "examples" / "loan_application_scripted.py"), stdin="I would like a loan\n")
    assert replaced.returncode == 0, replaced.stderr
    assert "LOAN_APPLICATION" in intents(db_url) and "CANCEL_ORDER" not in intents(db_url)


def test_without_a_pack_the_stored_configuration_is_used_as_it_is(db_url: str) -> None:
    assert chat(db_url, "--pack", str(LOAN), "--scripted",
                str(ROOT / "examples" / "loan_application_scripted.py")).returncode == 0
    plain = chat(db_url, stdin="hello\n")
    assert plain.returncode == 0, plain.stderr
    assert "CANCEL_ORDER" not in intents(db_url) and "LOAN_APPLICATION" in intents(db_url)
