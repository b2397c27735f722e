"""Bytes per turn: what one turn writes, table by table, at each audit level.

For each saver and each ``audit.level`` the support desk runs a number of turns (fewer than the
checkpoint-pruning interval, so nothing written is deleted yet) on a fresh database, and the bytes
each table gained are divided by the turns. Bytes are the stored row sizes: ``pg_column_size`` of
each row on PostgreSQL, the sum of the columns' lengths on SQLite (indexes and page overhead are
not counted on either). The last column projects the total to a million turns.

    python bench/bytes_per_turn.py [--turns 24]
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import SUPPORT_DESK, fresh_database, run_and_report
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine

TITLE = "Bytes written per turn by table (support desk; row bytes, indexes not counted)"
LEVELS = ("ALL", "STANDARD", "ERROR_ONLY", "NONE")
HEADER = ["saver", "audit.level", "total B/turn", "largest tables (B/turn)", "GB per 1M turns"]


def table_bytes(url: str) -> dict[str, int]:
    """Row bytes of every table in the database."""
    db = create_sync_engine(parse_database_url(url))
    try:
        with db.connect() as conn:
            names = sa.inspect(conn).get_table_names()
            return {name: _bytes(conn, name) for name in names}
    finally:
        db.dispose()


def _bytes(conn: sa.Connection, table: str) -> int:
    if conn.dialect.name == "postgresql":
        query = f'SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM "{table}" t'
    else:
        columns = [c["name"] for c in sa.inspect(conn).get_columns(table)]
        total = " + ".join(f'COALESCE(length(CAST("{c}" AS BLOB)), 0)' for c in columns)
        query = f'SELECT COALESCE(SUM({total}), 0) FROM "{table}"'
    return int(conn.execute(sa.text(query)).scalar_one())


async def per_turn(url: str, level: str, turns: int) -> dict[str, float]:
    """Bytes each table gained per turn over ``turns`` turns of one conversation (after its first turn)."""
    options = SUPPORT_DESK.options()
    engine = await Engine.aopen(url, **options, audit={"level": level})
    try:
        turns = min(turns, engine.settings.checkpoint_prune_every - 2)
        cid = str(uuid.uuid4())
        await engine.aprocess(SUPPORT_DESK.messages[0], cid)  # the conversation's row exists from here on
        before = table_bytes(url)
        for i in range(1, turns + 1):
            await engine.aprocess(SUPPORT_DESK.messages[i % len(SUPPORT_DESK.messages)], cid)
        after = table_bytes(url)
    finally:
        await engine.aclose()
    return {t: (after[t] - before.get(t, 0)) / turns for t in after if after[t] != before.get(t, 0)}


async def measure(turns: int, pg_url: str | None, folder: Path) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    rows, results = [], []
    for backend in ("sqlite", "postgres"):
        if backend == "postgres" and pg_url is None:
            continue
        for level in LEVELS:
            tables = await per_turn(fresh_database(backend, pg_url, folder), level, turns)
            total = sum(tables.values())
            top = sorted(tables.items(), key=lambda kv: -kv[1])
            shown = ", ".join(f"{t} {b:,.0f}" for t, b in top if b >= 50)
            rows.append([backend, level, f"{total:,.0f}", shown, f"{total * 1e6 / 1e9:,.1f}"])
            results.append({"saver": backend, "level": level, "bytes_per_turn": total, "tables": dict(top)})
    return rows, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=24)
    args = parser.parse_args()
    run_and_report("bytes_per_turn", TITLE, HEADER,
                   lambda folder, pg_url: measure(args.turns, pg_url, folder))


if __name__ == "__main__":
    main()
