"""bench/analytics.py runs end to end (a small size, SQLite only) and its JSON says what was measured
and under what load; timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

from bench import analytics


def test_the_benchmark_writes_its_measurements_and_the_load(tmp_path: Path) -> None:
    path = analytics.main(["--events", "20000", "--repeat", "1", "--sqlite-only", "--results", str(tmp_path)])
    data = json.loads(path.read_text())
    assert {"start", "end"} <= set(data["load"])
    rows = data["analytics"]
    assert {(r["query"], r["window"]) for r in rows} == {(label, window) for label, _ in analytics.QUERIES
                                                         for window in ("all", "7 days")}
    for r in rows:
        assert r["saver"] == "sqlite" and r["events_per_turn"] > 10
        assert r["events"] == r["turns"] * r["events_per_turn"] >= 20000 - r["events_per_turn"]
