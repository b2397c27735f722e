"""DB tools: SQL templates from ce_mcp_db_tool and guarded raw SQL, on the engine's or a named database.

Every query is checked by :mod:`convengine.tools.sql_guard` and run by
:mod:`convengine.tools.db_exec`: read-only, with a statement timeout, bound parameters, at most
``max_rows`` rows and ``mcp.max-result-bytes`` bytes. Raw-SQL tools (``postgres.query``,
``db.query``, ``sql.query``) run only when ``mcp.db.raw-sql-enabled`` is on, and only on a
database named for them in ``mcp.db.tool-databases`` unless ``mcp.db.raw-sql-on-engine-database``
is on too. Every refusal is audited as ``MCP_DB_SQL_REFUSED`` with its error code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa

from convengine._internal.jsontext import dumps
from convengine.catalog import stages
from convengine.catalog.errors import ErrorCode, ToolError
from convengine.config.records import DbToolRecord, ToolRecord
from convengine.db import create_sync_engine, parse_database_url
from convengine.settings import DbSettings, McpSettings
from convengine.tools.db_exec import Fetched, Limits, execute
from convengine.tools.sql_guard import SqlPolicy, UnsafeSqlError, bound_names, prepare, substitute_identifiers

RAW_SQL_TOOLS = frozenset({"postgres.query", "db.query", "sql.query"})
DEFAULT_LIMIT = 200
AUDITED_SQL_CHARS = 2000
DEFAULT_MCP = McpSettings()

Emit = Callable[[str, dict[str, Any]], None]


class DbRunner:
    """Runs checked SQL on the engine's database or a named one (``mcp.db.databases``)."""

    def __init__(self, default_engine: sa.Engine) -> None:
        self.default_engine = default_engine
        self._engines: dict[str, sa.Engine] = {}

    def engine_for(self, tool_code: str, settings: DbSettings) -> sa.Engine:
        name = database_name(tool_code, settings)
        if name is None:
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

    async def run_template(self, tool: ToolRecord, row: DbToolRecord, args: Mapping[str, Any],
                           settings: McpSettings | DbSettings, emit: Emit) -> list[dict[str, Any]]:
        """A ce_mcp_db_tool template with ``${identifier}`` placeholders and ``:named`` values."""
        mcp = _mcp(settings)
        with _refusals_audited(tool, row.sql_template, emit):
            sql = substitute_identifiers(row.sql_template, args, row.allowed_identifiers)
            return await self._run(tool, sql, dict(args), min(row.max_rows or DEFAULT_LIMIT, mcp.max_result_rows),
                                   mcp, emit)

    async def run_raw(self, tool: ToolRecord, args: Mapping[str, Any], settings: McpSettings | DbSettings,
                      emit: Emit) -> list[dict[str, Any]]:
        """A planner- or caller-supplied query: ``{"sql": ..., "params": {...}}`` (ConvEngine's postgres.query)."""
        mcp = _mcp(settings)
        sql = args.get("sql") or args.get("query")
        with _refusals_audited(tool, sql, emit):
            self._check_raw_allowed(tool.tool_code, mcp.db)
            params = args.get("params") or {}
            if not isinstance(params, Mapping):
                raise UnsafeSqlError("params must be an object of :name -> value")
            return await self._run(tool, sql if isinstance(sql, str) else "", dict(params), mcp.max_result_rows,
                                   mcp, emit)

    def _check_raw_allowed(self, tool_code: str, settings: DbSettings) -> None:
        if not settings.raw_sql_enabled:
            raise UnsafeSqlError(f"raw SQL tool {tool_code} is disabled: set mcp.db.raw-sql-enabled to let "
                                 "raw-SQL tools run")
        if self._on_engine_database(tool_code, settings) and not settings.raw_sql_on_engine_database:
            raise UnsafeSqlError(f"raw SQL tool {tool_code} would run on the engine's own database: name a database "
                                 "for it in mcp.db.tool-databases (or set mcp.db.raw-sql-on-engine-database)")

    def _on_engine_database(self, tool_code: str, settings: DbSettings) -> bool:
        """Unmapped, ``default``, or a named URL that reaches the engine's database as the engine's user."""
        name = database_name(tool_code, settings)
        if name is None:
            return True
        url = settings.databases.get(name)  # an undefined name fails with its own error in engine_for
        return url is not None and same_database(parse_database_url(url).sync_url, self.default_engine.url)

    async def _run(self, tool: ToolRecord, sql: str, args: dict[str, Any], max_rows: int, mcp: McpSettings,
                   emit: Emit) -> list[dict[str, Any]]:
        db = mcp.db
        policy = SqlPolicy.of(db)
        params = _bind(bound_names(sql), args, max_rows)
        checked = prepare(sql, params, policy)
        engine = self.engine_for(tool.tool_code, db)
        limits = Limits(max_rows, mcp.max_result_bytes, db.statement_timeout_ms)
        started = time.perf_counter()
        fetched = await asyncio.to_thread(execute, engine, checked.numbered, policy, limits)
        emit(stages.MCP_DB_SQL_EXECUTION, _execution(tool, checked.statement, params, fetched, started))
        return fetched.rows


def database_name(tool_code: str, settings: DbSettings) -> str | None:
    """The database a tool is mapped to in ``mcp.db.tool-databases``; None for the engine's own."""
    name = settings.tool_databases.get(tool_code) or settings.tool_databases.get(tool_code.lower())
    return None if not name or name == "default" else name


def same_database(a: sa.URL, b: sa.URL) -> bool:
    """Two URLs reach the same database as the same user (another role is another set of grants)."""
    if a.get_backend_name() != b.get_backend_name():
        return False
    if a.get_backend_name() == "sqlite":
        return _sqlite_file(a) == _sqlite_file(b)
    return (a.host or "localhost", a.port or 5432, a.database, a.username) == \
        (b.host or "localhost", b.port or 5432, b.database, b.username)


def _sqlite_file(url: sa.URL) -> str:
    return str(Path(url.database or "").expanduser().resolve())


def _mcp(settings: McpSettings | DbSettings) -> McpSettings:
    """The ``mcp`` section; a bare ``mcp.db`` section gets the default row and byte limits."""
    if isinstance(settings, McpSettings):
        return settings
    return DEFAULT_MCP.model_copy(update={"db": settings})


@contextmanager
def _refusals_audited(tool: ToolRecord, sql: object, emit: Emit) -> Iterator[None]:
    """Audit a ToolError from a DB tool as MCP_DB_SQL_REFUSED (code, message, SQL), then let it go on."""
    try:
        yield
    except ToolError as exc:
        text = sql[:AUDITED_SQL_CHARS] if isinstance(sql, str) else None
        emit(stages.MCP_DB_SQL_REFUSED, {"tool_code": tool.tool_code, "errorCode": exc.code.value, "error": exc.message,
                                    "sql": text})
        raise


def _bind(names: list[str], args: Mapping[str, Any], max_rows: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in names:
        if name in args:
            params[name] = _check_value(name, args[name])
        elif name == "limit":
            params[name] = max_rows
        else:
            raise ToolError(f"the query needs a value for :{name}", code=ErrorCode.INVALID_INPUT, recoverable=False)
    return params


def _check_value(name: str, value: object) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list) and all(v is None or isinstance(v, (str, int, float, bool)) for v in value):
        return value
    raise ToolError(f":{name} must be text, a number, true/false, null or a list of those, got {type(value).__name__}",
                    code=ErrorCode.INVALID_INPUT, recoverable=False)


def _execution(tool: ToolRecord, sql: str, params: dict[str, Any], fetched: Fetched, started: float) -> dict[str, Any]:
    return {"tool_code": tool.tool_code, "sql": sql, "params": _jsonable(params), "row_count": len(fetched.rows),
            "truncated": fetched.truncated, "bytes": fetched.size, "rows": fetched.rows[:5],
            "latencyMs": round((time.perf_counter() - started) * 1000, 2)}


def _jsonable(value: object) -> Any:
    return orjson.loads(dumps(value))
