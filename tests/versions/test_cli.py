"""The version lifecycle from the terminal: draft, diff, chat --draft, publish refused and done, rollback,
channels (on SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.cli.test_front_door import cli
from tests.versions.test_versions import WARM, warm_pack, write_tests


def test_the_lifecycle_from_the_terminal(db_url: str, tmp_path: Path) -> None:
    tests = write_tests(tmp_path)
    url = ["--url", db_url]
    assert cli("pack", "import", str(tmp_path / "greet.yaml"), *url).returncode == 0
    (tmp_path / "warm.yaml").write_text(yaml.safe_dump(warm_pack()), encoding="utf-8")
    drafted = cli("pack", "draft", str(tmp_path / "warm.yaml"), *url, "--author", "ann", "-m", "warmer")
    assert drafted.returncode == 0 and "draft: version 2" in drafted.stdout, drafted.stderr

    listed = cli("pack", "versions", *url).stdout
    assert "ann: warmer  (draft)" in listed and "(production)" in listed
    changed = cli("pack", "diff", "production", "draft", *url).stdout
    assert "ce_response:" in changed and f"'Hello there' -> '{WARM}'" in changed

    simulated = cli("chat", *url, "--draft", "--llm", "none", stdin="hello\n")
    assert WARM in simulated.stdout, simulated.stderr
    assert "Hello there" in cli("chat", *url, "--llm", "none", stdin="hello\n").stdout

    refused = cli("pack", "publish", *url, "--tests", str(tests), "--draft", "2")
    assert refused.returncode == 1 and "PUBLISH_REFUSED" in refused.stderr
    assert "the greeting is kept" in refused.stderr and "payload: expected 'Hello there'" in refused.stderr
    unnamed = cli("pack", "publish", *url, "--author", "bob")  # ann's edits: bob must name the draft
    assert unnamed.returncode == 1 and "DRAFT_NOT_NAMED" in unnamed.stderr and "ann" in unnamed.stderr
    walked = cli("pack", "channel", "production", "draft", *url)
    assert walked.returncode == 1 and "GATE_REQUIRED" in walked.stderr and "version 2" in walked.stderr
    published = cli("pack", "publish", *url, "--author", "bob", "--draft", "2")
    assert published.returncode == 0 and "published version 2 on production" in published.stdout
    assert WARM in cli("chat", *url, "--llm", "none", stdin="hello\n").stdout

    assert "rolled production back to version 1" in cli("pack", "rollback", "1", *url).stdout
    assert "Hello there" in cli("chat", *url, "--llm", "none", stdin="hello\n").stdout
    assert "staging serves version 2" in cli("pack", "channel", "staging", "2", *url).stdout
    missing = cli("pack", "diff", "1", "42", *url)
    assert missing.returncode == 2 and "VERSION_NOT_FOUND" in missing.stderr
