"""DB tools: Python handlers by tool code, SQL templates from ce_mcp_db_tool, guarded raw SQL.

Every query runs read-only (PostgreSQL: a READ ONLY transaction; SQLite: ``query_only``), with
a statement timeout, bound parameters and at most ``max_rows`` rows.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from convengine.config_loader.records import DbToolRecord, ToolRecord
from convengine.db import create_sync_engine, parse_database_url
from convengine.errors import ErrorCode, ToolError
from convengine.settings import DbSettings
from convengine.tools.sql_guard import UnsafeSqlError, bound_names, check_read_only, substitute_identifiers

RAW_SQL_TOOLS = frozenset({"postgres.query", "db.query", "sql.query"})
DEFAULT_LIMIT = 200


class DbRunner:
    """Runs checked SQL on the engine's database or a named one (``mcp.db.databases``)."""

    def __init__(self, default_engine: sa.Engine) -> None:
        self.default_engine = default_engine
        self._engines: dict[str, sa.Engine] = {}

    def engine_for(self, tool_code: str, settings: DbSettings) -> sa.Engine:
        name = settings.tool_databases.get(tool_code) or settings.tool_databases.get(tool_code.lower())
        if not name or name == "default":
            return self.default_engine
        url = settings.databases.get(name)
        if url is None:
            raise ToolError(f"tool {tool_code} uses database {name!r}, which mcp.db.databases does not define")
        if name not in self._engines:
            self._engines[name] = create_sync_engine(parse_database_url(url))
        return self._engines[name]

    def close(self) -> None:
        for engine in self._engines.values():
            engine.dispose()

    async def run_template(self, tool: ToolRecord, row: DbToolRecord, args: Mapping[str, Any], settings: DbSettings,
                           emit: Callable[[str, dict[str, Any]], None]) -> list[dict[str, Any]]:
        sql = substitute_identifiers(row.sql_template, args, row.allowed_identifiers)
        return await self._run(tool, sql, dict(args), row.max_rows or DEFAULT_LIMIT, settings, emit)

    async def run_raw(self, tool: ToolRecord, args: Mapping[str, Any], settings: DbSettings,
                      emit: Callable[[str, dict[str, Any]], None]) -> list[dict[str, Any]]:
        """A planner-supplied query: ``{"sql": ..., "params": {...}}`` (ConvEngine's postgres.query)."""
        sql = args.get("sql") or args.get("query")
        params = args.get("params") or {}
        if not isinstance(params, Mapping):
            raise UnsafeSqlError("params must be an object of :name -> value")
        return await self._run(tool, str(sql or ""), dict(params), DEFAULT_LIMIT, settings, emit)

    async def _run(self, tool: ToolRecord, sql: str, args: dict[str, Any], max_rows: int, s: DbSettings,
                   emit: Callable[[str, dict[str, Any]], None]) -> list[dict[str, Any]]:
        checked = check_read_only(sql, blocked_keywords=s.blocked_keywords, blocked_functions=s.blocked_functions,
                                  allowed_functions=s.allowed_functions)
        params = _bind(checked, args, max_rows)
        engine = self.engine_for(tool.tool_code, s)
        started = time.perf_counter()
        rows = await asyncio.to_thread(_execute, engine, checked, params, max_rows, s.statement_timeout_ms)
        emit("MCP_DB_SQL_EXECUTION", {"tool_code": tool.tool_code, "sql": checked, "params": _jsonable(params),
                                      "row_count": len(rows), "rows": rows[:5],
                                      "latencyMs": round((time.perf_counter() - started) * 1000, 2)})
        return rows


def _bind(sql: str, args: Mapping[str, Any], max_rows: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in bound_names(sql):
        if name in args:
            params[name] = _check_value(name, args[name])
        elif name == "limit":
            params[name] = min(max_rows, DEFAULT_LIMIT)
        else:
            raise ToolError(f"the query needs a value for :{name}", code=ErrorCode.INVALID_INPUT, recoverable=False)
    return params


def _check_value(name: str, value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list) and all(v is None or isinstance(v, (str, int, float, bool)) for v in value):
        return value
    raise ToolError(f":{name} must be text, a number, true/false, null or a list of those, got {type(value).__name__}",
                    code=ErrorCode.INVALID_INPUT, recoverable=False)


def _statement(sql: str, params: Mapping[str, Any]) -> sa.TextClause:
    clause = sa.text(sql)
    expanding = [sa.bindparam(n, expanding=True) for n, v in params.items() if isinstance(v, list)]
    return clause.bindparams(*expanding) if expanding else clause


def _execute(engine: sa.Engine, sql: str, params: dict[str, Any], max_rows: int, timeout_ms: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        raw = conn.connection.driver_connection if sqlite else None
        try:
            if sqlite:
                _sqlite_guard(raw, timeout_ms)
            else:
                conn.exec_driver_sql(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {int(timeout_ms)}")
            result = conn.execute(_statement(sql, params), params)
            rows = [_jsonable(dict(r._mapping)) for r in result.fetchmany(max_rows)] if result.returns_rows else []
        except sa.exc.DBAPIError as exc:
            raise _db_error(exc, timeout_ms) from exc
        finally:
            conn.rollback()
            if sqlite:
                raw.set_progress_handler(None, 0)
                raw.execute("PRAGMA query_only = OFF")
    return rows


def _sqlite_guard(raw: sqlite3.Connection, timeout_ms: int) -> None:
    raw.execute("PRAGMA query_only = ON")
    deadline = time.monotonic() + timeout_ms / 1000
    raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)


def _db_error(exc: sa.exc.DBAPIError, timeout_ms: int) -> ToolError:
    text = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
    if "interrupted" in text.lower() or "statement timeout" in text.lower() or "canceling statement" in text.lower():
        return ToolError(f"the query ran longer than {timeout_ms} ms and was stopped")
    if "readonly" in text.lower() or "read-only" in text.lower():
        return UnsafeSqlError(f"the database refused a write in a read-only query: {text}")
    return ToolError(f"the query failed: {text}")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
