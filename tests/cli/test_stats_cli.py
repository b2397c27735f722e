"""``convengine stats``: the numbers as JSON equal the test's own tally of the turns it inserted; the
table shows every group and the total (stored names printed inertly); a bad date is refused naming it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from bench.analytics import generate, insert
from convengine.cli.app import app
from tests.analytics.scenario import assert_rows_equal, numbers
from tests.analytics.test_generated import tally

runner = CliRunner()


def test_stats_prints_the_numbers_as_json_and_as_a_table(sqlite_db_url: str) -> None:
    data = generate(2_000, now=datetime.now(UTC), seed=11)
    data.steps[0]["intent_code"] = "EVIL\x1b[2J"  # a stored name with a terminal escape
    insert(sqlite_db_url, data)
    done = runner.invoke(app, ["stats", "--url", sqlite_db_url, "--by", "intent", "--json"])
    assert done.exit_code == 0, done.output
    body = json.loads(done.output)
    got = {(row["intent"],): numbers(row) for row in body["rows"]}
    assert_rows_equal(got, tally(data, ("intent",)))
    assert_rows_equal({(): numbers(body["total"])}, tally(data, ()))

    shown = runner.invoke(app, ["stats", "--url", sqlite_db_url, "--by", "intent,day", "--since", "2000-01-01"])
    assert shown.exit_code == 0, shown.output
    assert "est. cost" in shown.output and "total" in shown.output and "ORDER" in shown.output
    assert "\x1b" not in shown.output and "EVIL\\x1b[2J" in shown.output


def test_a_bad_date_or_grouping_is_refused_naming_it(tmp_path: Path, sqlite_db_url: str) -> None:
    bad = runner.invoke(app, ["stats", "--url", sqlite_db_url, "--since", "last week"])
    assert bad.exit_code == 2 and "--since" in bad.output and "ISO 8601" in bad.output
    grouped = runner.invoke(app, ["stats", "--url", sqlite_db_url, "--by", "week"])
    assert grouped.exit_code == 2 and "by" in grouped.output
