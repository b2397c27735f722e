"""The default install has no PostgreSQL driver: a SQLite conversation (the README's first command)
must not need one. The PostgreSQL extra (psycopg) is imported only where PostgreSQL is used."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[1]

WITHOUT_PSYCOPG = textwrap.dedent("""
    import importlib.abc, sys
    from pathlib import Path

    class NoPostgresDriver(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoPostgresDriver())
    from convengine.config_loader.companions import pack_options
    from convengine.engine import Engine

    with Engine.open(f"sqlite:///{sys.argv[1]}", **pack_options(Path(sys.argv[2]))) as engine:
        first = engine.process("hello")
        second = engine.process("I want to cancel my order", first.conversation_id)
    print(first.intent, first.state, second.intent, second.state)
    print(sorted(name for name in sys.modules if name.split(".")[0].startswith("psycopg")))
""")


def test_a_sqlite_conversation_runs_without_the_postgres_driver(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_PSYCOPG, str(tmp_path / "chat.db"),
                           str(ROOT / "examples" / "support_desk.yaml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    turns, modules = done.stdout.strip().splitlines()[-2:]
    assert turns == "GREETING IDLE CANCEL_ORDER ASK_REASON"
    assert modules == "[]"
