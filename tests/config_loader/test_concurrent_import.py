"""Replicas starting together with one pack all come up; re-importing the same pack changes nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from convengine.config_loader import import_pack
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine

ROOT = Path(__file__).parents[2]
SUPPORT = ROOT / "examples" / "support_desk.yaml"
OPEN = "import sys; from convengine.engine import Engine; Engine.open(sys.argv[1], pack=sys.argv[2]).close()"


def rows(url: str, query: str) -> list[tuple]:
    engine = create_sync_engine(parse_database_url(url))
    with engine.connect() as conn:
        found = [tuple(r) for r in conn.execute(sa.text(query))]
    engine.dispose()
    return found


async def test_three_engines_opening_together_with_the_stored_pack_all_come_up(db_url: str) -> None:
    for _ in range(2):  # a fresh database, then one that already holds the pack
        engines = await asyncio.gather(*(Engine.aopen(db_url, pack=SUPPORT) for _ in range(3)))
        results = [await e.aprocess("hello") for e in engines]
        for engine in engines:
            await engine.aclose()
        assert {r.intent for r in results} == {"GREETING"}
        assert rows(db_url, "SELECT count(*) FROM ce_state_graph") == rows(db_url, "SELECT count(DISTINCT "
                                                                                "state_graph_id) FROM ce_state_graph")


def test_three_replica_processes_start_together(db_url: str) -> None:
    import_pack(create_sync_engine(parse_database_url(db_url)), SUPPORT)
    children = [subprocess.Popen([sys.executable, "-c", OPEN, db_url, str(SUPPORT)], cwd=ROOT,
                                 stderr=subprocess.PIPE, text=True) for _ in range(3)]
    failures = [c.stderr.read() for c in children if c.wait(timeout=120) != 0]  # type: ignore[union-attr]
    assert failures == []


def test_the_same_pack_again_leaves_the_rows_untouched_and_an_edited_one_imports(db_url: str,
                                                                                 tmp_path: Path) -> None:
    engine = create_sync_engine(parse_database_url(db_url))
    import_pack(engine, SUPPORT)
    stamps = rows(db_url, "SELECT intent_code, created_at FROM ce_intent ORDER BY intent_code")
    import_pack(engine, SUPPORT)
    assert rows(db_url, "SELECT intent_code, created_at FROM ce_intent ORDER BY intent_code") == stamps
    edited = tmp_path / "edited.yaml"
    edited.write_text(SUPPORT.read_text().replace("Cancel an order", "Cancel an order (edited)"))
    import_pack(engine, edited)
    assert ("Cancel an order (edited)",) in rows(db_url, "SELECT description FROM ce_intent")
    engine.dispose()
