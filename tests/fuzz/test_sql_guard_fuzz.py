"""Property: whatever SQL the guard accepts runs as one read that changes nothing, on PostgreSQL and SQLite.

Hypothesis builds SQL from grammar-shaped pieces (literals of every quoting kind, comments, semicolons,
quoted identifiers, function calls, COPY, DO, CTEs with DML, locking clauses, parameters) and from
valid SELECTs with one hostile piece spliced in. Every input the guard accepts is run through the DB
tool runner (``DbRunner.run_raw``) on a real PostgreSQL database and on SQLite; afterwards the canary
table, its sequence, the set of tables, advisory locks and a folder the server could write to must be
exactly as before, and no failure may be the database refusing a write or a second statement.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convengine.catalog.errors import ToolError
from convengine.config.records import ToolRecord
from convengine.db import create_sync_engine, parse_database_url
from convengine.settings import DbSettings, McpSettings
from convengine.tools.db import DbRunner
from convengine.tools.sql_guard import SqlPolicy, UnsafeSqlError, bound_names, prepare
from tests.conftest import drop_postgres_database, new_postgres_database

pytestmark = pytest.mark.postgres

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOL = ToolRecord(tool_id=1, tool_code="db.query", tool_group="DB")
MCP = McpSettings(db=DbSettings(raw_sql_enabled=True, raw_sql_on_engine_database=True, statement_timeout_ms=1000))
WRITE_SYMPTOMS = ("read-only", "readonly", "multiple commands", "one statement", "permission denied", "not allowed")
DROP = "DROPDIR"

LITERALS = ["'a'", "'it''s'", "E'\\''", "E'\\\\'", "E'\\' '", "$$x$$", "$_$'$_$", "$q$;$q$", "U&'d\\0061t'",
            'U&"d\\0061t"', "B'101'", "X'1F'", "N'x'", "1", "1.5e3", "NULL", "TRUE", "'; DELETE FROM canary; --'"]
COMMENTS = ["-- c\n", "--", "/* ; */", "/* /* nested */ */", "/*", "*/", "\n"]
SYNTAX = ["SELECT", "WITH c AS (", ")", "(", ",", ";", "FROM canary", "WHERE", "AND", "OR", "UNION", "ORDER BY 1",
          "LIMIT 2", "AS x", "::text", "::regclass", "IN", "EXISTS", "c", "id", "label", '"label"', "*", "'", '"',
          "$", ":", "::", "\\", "E'", "$a$", "FOR UPDATE", "FOR SHARE", "INTO copied", "TABLESAMPLE system(50)",
          "TABLESAMPLE system_time(100)", ":id", ":ids", "$1", "xmin", "pg_catalog.pg_authid"]
CALLS = ["lower(label)", "count(*)", "pg_sleep(0.2)", '"pg_sleep"(0.2)', 'pg_catalog."pg_sleep"(0.2)',
         "pg_advisory_lock(7)", "pg_try_advisory_lock(7)", "set_config('search_path', 'x', false)",
         "nextval('canary_seq')", "pg_read_file('/etc/hostname')", "lo_import('/etc/hostname')",
         "pg_notify('c', 'x')", "current_setting('data_directory')", "hex(zeroblob(10))", '"LOWER"(label)']
STATEMENTS = [f"COPY (SELECT 1) TO PROGRAM 'touch {DROP}/f'", "DO $$BEGIN DELETE FROM canary; END$$",
              "DELETE FROM canary", "INSERT INTO canary VALUES (99, 'x')", "UPDATE canary SET label = 'z'", "COMMIT",
              "BEGIN", "ROLLBACK", "SET ROLE postgres", "CREATE TABLE t2 (x int)", "DROP TABLE canary", "LISTEN x",
              "NOTIFY x", "PREPARE p AS SELECT 1", "DELETE FROM canary RETURNING *", "VACUUM canary",
              "SELECT * INTO t3 FROM canary", "TRUNCATE canary"]
PIECES = LITERALS + COMMENTS + SYNTAX + CALLS + STATEMENTS

plain_columns = st.sampled_from(["id", "label", "lower(label)", "count(*) OVER ()", "'a'", "E'\\''", "U&'d\\0061t'",
                                 "1", "id::text", "coalesce(label, 'x')", "length(label)", ":id", "upper(:name)",
                                 "(SELECT max(id) FROM canary)", "'; DELETE FROM canary; --'", '"label"'])
columns = st.one_of(plain_columns, plain_columns, plain_columns, st.sampled_from(CALLS))
selects = st.builds(
    lambda cols, where, tail: f"SELECT {', '.join(cols)} FROM canary{where}{tail}",
    st.lists(columns, min_size=1, max_size=3),
    st.sampled_from(["", " WHERE id = :id", " WHERE label IN :ids", " WHERE id > 1 -- ; DELETE FROM canary\n"]),
    st.sampled_from(["", ";", " LIMIT 2", " /* ; */", " -- trailing; DELETE FROM canary", " ORDER BY 1", " FOR UPDATE",
                     " UNION SELECT 1, 'x'", "; DELETE FROM canary", "; COMMIT; DELETE FROM canary"]))
ctes = st.builds(lambda body, main: f"WITH c AS ({body}) {main}",
                 st.sampled_from(["SELECT * FROM canary", "DELETE FROM canary RETURNING *", "SELECT nextval('canary_seq')",
                                  "INSERT INTO canary VALUES (50, 'x') RETURNING *", "SELECT 1 FOR UPDATE",
                                  "UPDATE canary SET label = 'q' RETURNING *"]),
                 st.sampled_from(["SELECT * FROM c", "SELECT count(*) FROM c", "DELETE FROM canary", "TABLE c"]))
spliced = st.builds(lambda sql, piece, at: sql[:at % (len(sql) + 1)] + piece + sql[at % (len(sql) + 1):],
                    st.one_of(selects, ctes), st.sampled_from(PIECES), st.integers(0, 400))
joined = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(["", " ", "\n"])), min_size=1, max_size=14).map(
    lambda parts: "".join(piece + gap for piece, gap in parts))
queries = st.one_of(selects, selects, selects, ctes, spliced, joined)


def canary_database(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE canary (id INTEGER PRIMARY KEY, label TEXT)"))
        conn.execute(sa.text("INSERT INTO canary VALUES (1, 'a'), (2, 'b'), (3, 'c')"))
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("CREATE SEQUENCE canary_seq"))


def snapshot(engine: sa.Engine) -> dict[str, Any]:
    """What no accepted query may change."""
    with engine.connect() as conn:
        seen = {"rows": conn.execute(sa.text("SELECT id, label FROM canary ORDER BY id")).all(),
                "tables": sorted(sa.inspect(conn).get_table_names())}
        if engine.dialect.name == "postgresql":
            seen["sequence"] = conn.execute(sa.text("SELECT last_value, is_called FROM canary_seq")).one()
            seen["locks"] = conn.execute(sa.text(  # this database's only: other tests share the server
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                "WHERE l.locktype = 'advisory' AND d.datname = current_database()")).scalar()
    return seen


@pytest.fixture
def databases(tmp_path: Path) -> Iterator[tuple[DbRunner, DbRunner, Path]]:
    pg_url = new_postgres_database(migrated=False)
    pg = create_sync_engine(parse_database_url(pg_url))
    lite = create_sync_engine(parse_database_url(f"sqlite:///{tmp_path / 'fuzz.db'}"))
    for engine in (pg, lite):
        canary_database(engine)
    drop = Path(tempfile.mkdtemp(prefix="ce-sql-fuzz-"))
    drop.chmod(0o777)  # the database server's user could write here
    yield DbRunner(pg), DbRunner(lite), drop
    shutil.rmtree(drop, ignore_errors=True)
    for engine in (pg, lite):
        engine.dispose()
    drop_postgres_database(pg_url)


def values_for(sql: str) -> dict[str, Any]:
    try:
        names = bound_names(sql)
    except UnsafeSqlError:
        return {}
    return {name: ["a", "b"] if name == "ids" else 1 for name in names}


def run(runner: DbRunner, sql: str, params: dict[str, Any]) -> str:
    """'ok', or the error of a query the database itself turned down."""
    try:
        asyncio.run(runner.run_raw(TOOL, {"sql": sql, "params": params}, MCP, lambda stage, payload: None))
    except ToolError as exc:
        return exc.message
    return "ok"


def test_accepted_sql_runs_as_one_read_that_changes_nothing(databases: tuple[DbRunner, DbRunner, Path]) -> None:
    pg, lite, drop = databases
    before = {runner: snapshot(runner.default_engine) for runner in (pg, lite)}
    stats: Counter[str] = Counter()

    @FUZZ
    @given(sql=queries)
    def check(sql: str) -> None:
        sql = sql.replace(DROP, str(drop))
        params = values_for(sql)
        try:
            prepare(sql, params, SqlPolicy.of(MCP.db))
        except ToolError:
            stats["refused"] += 1
            return
        stats["accepted"] += 1
        for runner in (pg, lite):
            outcome = run(runner, sql, params)
            stats[f"{runner.default_engine.dialect.name}:{'ok' if outcome == 'ok' else 'db error'}"] += 1
            assert not any(symptom in outcome.lower() for symptom in WRITE_SYMPTOMS), (sql, outcome)
            assert snapshot(runner.default_engine) == before[runner], sql
        assert list(drop.iterdir()) == [], sql

    check()
    assert stats["accepted"] >= 10 and stats["postgresql:ok"] >= 5, stats  # the property was exercised
