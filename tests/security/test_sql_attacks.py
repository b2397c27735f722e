"""DB tools run one read-only statement, calling only allowed functions, within a result budget.

Attacks (each reproduced on current main before the fix): the hand-written scanner accepted
``E'\\' ' ; COMMIT; DELETE ...'``, ``$_$'$_$; COMMIT; ...`` and quoted function names; parameter-less SQL
went over PostgreSQL's simple query protocol, so stacked statements ran, ``COMMIT`` ended the READ ONLY
transaction and ``COPY ... TO PROGRAM`` ran a shell command; ``pg_try_advisory_lock(<conversation key>)``
left a conversation busy forever on a pooled connection; ``hex(zeroblob(5000000))`` answered a small request
with 10 MB; raw SQL ran without any opt-in, on the engine's own database. Each test drives the engine (or a
live server) with a caller ``tool_request`` and shows the attack refused, audited with its error code, and
nothing changed: the ``ce_*`` tables and other conversations (``World``), a canary table, files on disk.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import convengine.tools.db as db_module
from convengine.audit import AuditEvent
from convengine.checkpointing import _lock_key
from convengine.config_loader.packs import dump_pack
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from convengine.tools import db_exec
from convengine.tools.sql_guard import Checked
from convengine.tools.sql_tokens import number, statement_text, tokens
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.security.world import assert_unchanged, files_under

pytestmark = pytest.mark.asyncio

TOOLS = [{"tool_id": 41, "tool_code": "db.query", "tool_group": "DB", "intent_code": "LOAN", "state_code": "ANY",
          "description": "Run a read-only SQL query"},
         {"tool_id": 42, "tool_code": "canary.rows", "tool_group": "DB", "intent_code": "LOAN", "state_code": "ANY",
          "description": "Rows of a table"}]
DB_TOOLS = [{"tool_id": 42, "sql_template": "SELECT * FROM ${table} ORDER BY id", "param_schema": {}, "max_rows": 500,
             "allowed_identifiers": {"table": ["canary", "wide", "narrow"]}}]
RAW_ON_ENGINE_DB = {"raw-sql-enabled": True, "raw-sql-on-engine-database": True, "statement-timeout-ms": 3000}
BIG_VALUE = {"sqlite": "SELECT hex(zeroblob(5000000)) AS blob", "postgres": "SELECT repeat('00', 5000000) AS blob"}
MANY_WIDE_ROWS = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 100000000) "
                  f"SELECT n, '{'x' * 2000}' AS pad FROM c")


def sql_pack(**db: Any) -> dict[str, Any]:
    return pack(ce_mcp_tool=TOOLS, ce_mcp_db_tool=DB_TOOLS, settings={"mcp": {"db": db}, "turn-lock-timeout-s": 2})


@pytest.fixture
def canary(db_url: str) -> str:
    """The engine's database with a ``canary`` table of 3 rows next to the ce_* tables."""
    engine = create_sync_engine(parse_database_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE canary (id INTEGER PRIMARY KEY, label TEXT)"))
        conn.execute(sa.text("INSERT INTO canary VALUES (1, 'a'), (2, 'b'), (3, 'c')"))
    engine.dispose()
    return db_url


def canary_rows(url: str) -> int:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM canary")).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture
def drop_dir() -> Iterator[Path]:
    """An empty folder the database server's own user could write to."""
    folder = Path(tempfile.mkdtemp(prefix="ce-sql-attack-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def ask(engine: Engine, cid: str, sql: str, tool: str = "db.query", **args: Any) -> list[AuditEvent]:
    """One turn whose caller asks for the raw-SQL tool; the turn's audit events."""
    request = {"tool_code": tool, "args": {"sql": sql, **args}}
    await engine.aprocess("x", cid, input_params={"tool_request": request})
    return await turn_events(engine, cid)


def refused(events: Sequence[AuditEvent], code: str = "UNSAFE_SQL") -> str:
    """The turn's tool call was refused with ``code`` before anything ran; the error text."""
    assert "MCP_DB_SQL_EXECUTION" not in [e.stage for e in events]
    audited = payload_of(events, "MCP_DB_SQL_REFUSED")
    shaped = payload_of(events, "TOOL_ORCHESTRATION_ERROR")
    assert audited["errorCode"] == code, audited
    assert shaped["status"] == "ERROR" and shaped["error"] == audited["error"]
    return str(audited["error"])


def result_of(events: Sequence[AuditEvent]) -> Any:
    return payload_of(events, "TOOL_ORCHESTRATION_RESULT")["result"]


async def conversations(engine: Engine) -> tuple[str, str]:
    """(victim, attacker): two conversations in the LOAN intent, where the DB tools are in scope."""
    return (await engine.aprocess("loan")).conversation_id, (await engine.aprocess("loan")).conversation_id


def unchecked(sql: str, values: Any, policy: Any) -> Checked:
    """The guard switched off: the statement is only numbered, as a bypass of the parser would leave it."""
    text = statement_text(sql, tokens(sql))
    return Checked(text, number(text, tokens(text), values))


def unwrapped(statement: str, max_bytes: int) -> str:
    """The row-size wrapper switched off: PostgreSQL gets the statement itself."""
    return statement


SCANNER_BYPASSES = [
    ("SELECT E'\\' ' ; COMMIT; DELETE FROM ce_audit; --'", "only one statement is allowed (found 3)"),
    ("SELECT E'\\\\' ' ; COMMIT; DELETE FROM ce_audit; --'", "SQL does not parse: syntax error"),
    ("SELECT $_$'$_$; COMMIT; DELETE FROM ce_conversation_history; --'", "dollar-quoted strings are not allowed"),
    ("SELECT 1; COMMIT; DELETE FROM ce_audit", "only one statement is allowed (found 3)"),
    ("SELECT 1 /* ; */; COMMIT; DELETE FROM canary", "only one statement is allowed"),
    ('SELECT "pg_sleep"(5)', "function pg_sleep() is not allowed"),
    ('SELECT pg_catalog."pg_sleep"(5)', "function pg_sleep() is not allowed"),
    ('SELECT * FROM "pg_sleep"(5)', "function pg_sleep() is not allowed"),
    ("SELECT \"pg_read_file\"('/etc/hostname')", "function pg_read_file() is not allowed"),
    ('SELECT count(*) FILTER (WHERE "pg_sleep"(5) IS NULL) FROM canary', "function pg_sleep() is not allowed"),
    ('SELECT "LOWER"(label) FROM canary', "function LOWER() is not in the allowed function list"),
    ("WITH gone AS (DELETE FROM canary RETURNING *) SELECT count(*) FROM gone", "keyword DELETE is not allowed"),
    ("SELECT * INTO canary_copy FROM canary", "SELECT ... INTO is not allowed"),
    ("SELECT * FROM canary FOR UPDATE", "locking clauses"),
    ("SELECT 'canary'::regclass", "type regclass is not allowed"),
    ("SELECT xmin, ctid FROM canary", "system column xmin is not readable"),
    ("SELECT rolpassword FROM pg_catalog.pg_authid", "system catalog pg_catalog.pg_authid is not readable"),
    ("SELECT 1 FROM canary TABLESAMPLE system_time(5000)", "TABLESAMPLE method system_time is not allowed"),
    ("DO 'BEGIN DELETE FROM canary; END'", "only SELECT or WITH queries are allowed, got DO"),
]


async def test_scanner_bypasses_and_hidden_calls_are_refused(canary: str, world: Any) -> None:
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        victim, cid = await conversations(engine)
        before = world(attacker=cid)
        started = time.monotonic()
        outcomes = [(sql, message, await ask(engine, cid, sql)) for sql, message in SCANNER_BYPASSES]
        assert time.monotonic() - started < 30  # no pg_sleep ran
        assert_unchanged(before, world(attacker=cid))
        assert canary_rows(canary) == 3
        for sql, message, events in outcomes:
            assert message in refused(events), sql
        assert (await engine.aprocess("still here", victim)).intent == "LOAN"


async def test_copy_to_program_never_runs(canary: str, world: Any, drop_dir: Path) -> None:
    target = drop_dir / "pwned"
    attacks = [f"COPY (SELECT 1) TO PROGRAM 'touch {target}'",
               f"SELECT $_$'$_$; COMMIT; COPY (SELECT 1) TO PROGRAM 'touch {target}'; --'",
               f"SELECT E'\\' ' ; COMMIT; COPY (SELECT 1) TO PROGRAM 'touch {target}'; --'",
               f"SELECT 1; COMMIT; COPY (SELECT 1) TO PROGRAM 'touch {target}'"]
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        _, cid = await conversations(engine)
        before = world(attacker=cid)
        outcomes = [await ask(engine, cid, sql) for sql in attacks]
        assert not target.exists() and files_under(drop_dir) == {}, "COPY ... TO PROGRAM ran a command"
        assert_unchanged(before, world(attacker=cid))
        for events in outcomes:
            refused(events)


async def test_a_second_statement_cannot_run_even_past_the_guard(canary: str, world: Any, backend: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: with the parser switched off, the database itself still runs one read."""
    monkeypatch.setattr(db_module, "prepare", unchecked)
    monkeypatch.setattr(db_exec, "row_bounded", unwrapped)  # the statement runs as given, not inside the row check
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        _, cid = await conversations(engine)
        before = world(attacker=cid)
        stacked = [await ask(engine, cid, sql) for sql in ("SELECT 1; DELETE FROM canary",
                                                           "SELECT 1; COMMIT; DELETE FROM ce_audit")]
        write = await ask(engine, cid, "DELETE FROM canary")
        assert_unchanged(before, world(attacker=cid))
        assert canary_rows(canary) == 3
        for events in stacked:
            assert "only one statement is allowed" in refused(events)
        expected = "read-only transaction" if backend == "postgres" else "DELETE canary is not allowed"
        assert expected in refused(write)
        if backend == "sqlite":  # SQLite's authorizer holds the function allow-list too
            assert "function hex() is not in the allowed" in refused(await ask(engine, cid, BIG_VALUE["sqlite"]))


async def test_advisory_lock_functions_are_refused(canary: str, world: Any) -> None:
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        victim, cid = await conversations(engine)
        before = world(attacker=cid)
        functions = ("pg_try_advisory_lock", "pg_advisory_lock", "pg_advisory_lock_shared")
        outcomes = [await ask(engine, cid, f"SELECT {function}({_lock_key(victim)})") for function in functions]
        assert_unchanged(before, world(attacker=cid))
        assert (await engine.aprocess("my turn", victim)).intent == "LOAN"  # not CONVERSATION_BUSY
        for function, events in zip(functions, outcomes, strict=True):
            assert f"function {function}() is not allowed" in refused(events)


async def test_a_lock_taken_by_an_allowed_function_does_not_outlive_the_query(canary: str, backend: str) -> None:
    """Even when an operator allows a locking function, the tool's session is cleared after the query."""
    if backend != "postgres":
        pytest.skip("session-level advisory locks are PostgreSQL's; SQLite tool connections keep no session state")
    data = sql_pack(**RAW_ON_ENGINE_DB, **{"allowed-functions": ["pg_try_advisory_lock"]})
    async with engine_on(canary, data) as engine:
        victim, cid = await conversations(engine)
        taken = result_of(await ask(engine, cid, f"SELECT pg_try_advisory_lock({_lock_key(victim)}) AS taken"))
        assert taken == [{"taken": True}]
        result = await engine.aprocess("my turn", victim)  # the turn lock would wait 2 s, then CONVERSATION_BUSY
        assert result.intent == "LOAN"


async def test_large_results_are_refused_while_fetching(canary: str, backend: str, world: Any) -> None:
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:
        _, cid = await conversations(engine)
        assert "function hex() is not in the allowed function list" in \
            refused(await ask(engine, cid, BIG_VALUE["sqlite"]))
    data = sql_pack(**{**RAW_ON_ENGINE_DB, "statement-timeout-ms": 60_000,
                       "allowed-functions": ["hex", "zeroblob", "repeat"]})
    async with engine_on(canary, data) as engine:
        _, cid = await conversations(engine)
        before = world(attacker=cid)
        events = await ask(engine, cid, BIG_VALUE[backend])
        assert "larger than mcp.max-result-bytes (262144 bytes as JSON) at row 1;" in \
            refused(events, "TOOL_RESULT_TOO_LARGE")
        assert max(len(str(e.payload)) for e in events) < 20_000  # nothing of the 10 MB reached the audit
        started = time.monotonic()
        error = refused(await ask(engine, cid, MANY_WIDE_ROWS), "TOOL_RESULT_TOO_LARGE")
        stopped_at = int(re.search(r"at row (\d+);", error).group(1))  # type: ignore[union-attr]
        assert 100 < stopped_at < 200 and time.monotonic() - started < 20  # 2 KB rows: stopped at 256 KB
        assert_unchanged(before, world(attacker=cid))


async def test_db_template_results_have_the_same_budget(canary: str) -> None:
    engine_ = create_sync_engine(parse_database_url(canary))
    with engine_.begin() as conn:
        conn.execute(sa.text("CREATE TABLE wide (id INTEGER PRIMARY KEY, pad TEXT)"))
        conn.execute(sa.text("INSERT INTO wide VALUES " + ", ".join(f"({i}, '{'y' * 3000}')" for i in range(200))))
        conn.execute(sa.text("CREATE TABLE narrow (id INTEGER PRIMARY KEY)"))
        conn.execute(sa.text("INSERT INTO narrow VALUES " + ", ".join(f"({i})" for i in range(250))))
    engine_.dispose()
    async with engine_on(canary, sql_pack()) as engine:
        _, cid = await conversations(engine)
        assert len(result_of(await ask(engine, cid, "", tool="canary.rows", table="canary"))) == 3
        events = await ask(engine, cid, "", tool="canary.rows", table="wide")
        assert "larger than mcp.max-result-bytes" in refused(events, "TOOL_RESULT_TOO_LARGE")
        events = await ask(engine, cid, "", tool="canary.rows", table="narrow")  # the row allows 500
        assert len(result_of(events)) == 200  # mcp.max-result-rows
        assert payload_of(events, "MCP_DB_SQL_EXECUTION")["truncated"] is True


async def test_raw_sql_runs_only_when_enabled(canary: str, world: Any) -> None:
    async with engine_on(canary, sql_pack()) as engine:
        _, cid = await conversations(engine)
        before = world(attacker=cid)
        error = refused(await ask(engine, cid, "SELECT count(*) AS n FROM canary"))
        assert error == "raw SQL tool db.query is disabled: set mcp.db.raw-sql-enabled to let raw-SQL tools run"
        assert_unchanged(before, world(attacker=cid))


async def test_raw_sql_does_not_run_on_the_engine_database_unless_allowed(canary: str, world: Any) -> None:
    alias = {"databases": {"alias": canary}, "tool-databases": {"db.query": "alias"}}
    for db in ({"raw-sql-enabled": True}, {"raw-sql-enabled": True, **alias}):
        async with engine_on(canary, sql_pack(**db)) as engine:
            _, cid = await conversations(engine)
            before = world(attacker=cid)
            error = refused(await ask(engine, cid, "SELECT count(*) AS n FROM ce_audit"))
            assert "raw SQL tool db.query would run on the engine's own database" in error, db
            assert_unchanged(before, world(attacker=cid))
    async with engine_on(canary, sql_pack(**RAW_ON_ENGINE_DB)) as engine:  # the operator's explicit choice
        _, cid = await conversations(engine)
        assert result_of(await ask(engine, cid, "SELECT count(*) AS n FROM canary")) == [{"n": 3}]


@pytest.fixture
def reader_url(canary: str, backend: str) -> Iterator[str]:
    """A login role that may only read ``canary``, read-only by default, on the test database."""
    if backend != "postgres":
        pytest.skip("database roles are PostgreSQL's")
    role = f"ce_tool_reader_{uuid.uuid4().hex[:8]}"
    url = parse_database_url(canary).sync_url
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for statement in (f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
                          f"ALTER ROLE {role} SET default_transaction_read_only = on",
                          f"GRANT CONNECT ON DATABASE {url.database} TO {role}",
                          f"GRANT USAGE ON SCHEMA public TO {role}", f"GRANT SELECT ON canary TO {role}"):
            conn.execute(sa.text(statement))
    yield url.set(drivername="postgresql", username=role, password=None).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP OWNED BY {role}"))
        conn.execute(sa.text(f"DROP ROLE {role}"))
    admin.dispose()


async def test_a_read_only_role_refuses_writes_even_past_every_engine_check(
        canary: str, reader_url: str, world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = sql_pack(**{"raw-sql-enabled": True, "databases": {"reporting": reader_url},
                       "tool-databases": {"db.query": "reporting"}})
    async with engine_on(canary, data) as engine:
        _, cid = await conversations(engine)
        assert result_of(await ask(engine, cid, "SELECT count(*) AS n FROM canary")) == [{"n": 3}]
        denied = refused(await ask(engine, cid, "SELECT count(*) AS n FROM ce_audit"))
        assert "permission denied for table ce_audit" in denied
        before = world(attacker=cid)
        monkeypatch.setattr(db_module, "prepare", unchecked)  # no parser check
        monkeypatch.setattr(db_exec, "row_bounded", unwrapped)  # no row-size wrapper
        monkeypatch.setattr(db_exec, "begin_read_only", lambda driver, timeout_ms: None)  # no READ ONLY transaction
        for sql in ("DELETE FROM canary", "INSERT INTO canary VALUES (9, 'z')"):
            assert "read-only transaction" in refused(await ask(engine, cid, sql)), sql
        assert_unchanged(before, world(attacker=cid))
    assert canary_rows(canary) == 3


# --- over HTTP against a live server ---------------------------------------------------------------


async def test_stacked_statements_and_huge_results_over_http(canary: str, backend: str, serve: Any, world: Any,
                                                             tmp_path: Path) -> None:
    data = sql_pack(**{**RAW_ON_ENGINE_DB, "allowed-functions": ["hex", "zeroblob", "repeat"]})
    pack_file = tmp_path / "sql_pack.yaml"
    pack_file.write_text(dump_pack(data), encoding="utf-8")
    server = serve(pack=pack_file)
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        async def say(text: str, cid: str | None = None, sql: str | None = None) -> httpx.Response:
            params = {"tool_request": {"tool_code": "db.query", "args": {"sql": sql}}} if sql else {}
            response = await client.post("/api/v1/conversation/message",
                                         json={"message": text, "conversationId": cid, "inputParams": params})
            assert response.status_code == 200, response.text
            return response

        async def last_refusal(cid: str) -> dict[str, Any]:
            rows = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
            return [json.loads(r["payloadJson"]) for r in rows if r["stage"] == "MCP_DB_SQL_REFUSED"][-1]

        victim = (await say("loan")).json()["conversationId"]
        cid = (await say("loan")).json()["conversationId"]
        before = world(attacker=cid)
        await say("x", cid, "SELECT $_$'$_$; COMMIT; DELETE FROM ce_audit; --'")
        assert (await last_refusal(cid))["errorCode"] == "UNSAFE_SQL"
        await say("x", cid, "SELECT 1; COMMIT; DELETE FROM ce_audit")
        assert "only one statement is allowed" in (await last_refusal(cid))["error"]
        response = await say("x", cid, BIG_VALUE[backend])
        assert len(response.content) < 20_000  # a 200-byte request does not get a 10 MB answer
        assert (await last_refusal(cid))["errorCode"] == "TOOL_RESULT_TOO_LARGE"
        assert_unchanged(before, world(attacker=cid))
        assert (await say("my turn", victim)).json()["conversationId"] == victim
    assert canary_rows(canary) == 3
