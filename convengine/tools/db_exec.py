"""Running one checked tool query: read-only, bounded in time, rows and bytes; the session reset after.

PostgreSQL: a READ ONLY transaction with a statement timeout (and standard-conforming strings,
so the server reads literals as the guard's parser did); the statement goes over the extended
protocol (``Cursor.stream``: Parse/Bind/Execute, even with no parameters), where a second
statement is a protocol error; rows are read one at a time; afterwards the transaction is rolled
back and the session cleared with ``DISCARD ALL`` (advisory locks, settings, LISTEN, prepared
statements, temporary tables) before the connection returns to its pool, or the connection is
dropped. SQLite: ``query_only`` plus an authorizer that allows reads and allowed functions only,
a progress handler as the timeout, and one prepared statement.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import sqlalchemy as sa

from convengine._internal.jsontext import dumps
from convengine.catalog.errors import ErrorCode, ToolError
from convengine.tools.sql_policy import SqlPolicy
from convengine.tools.sql_tokens import Numbered, UnsafeSqlError

ROW_TOO_LARGE = "convengine: tool row over the byte budget"
"""Marks the error PostgreSQL raises for a row over ``Limits.bytes`` (see :func:`row_bounded`)."""
SQLITE_MAX_VALUE_BYTES = 16 * 1024 * 1024
"""The longest string or blob a SQLite tool query may build or read (SQLITE_LIMIT_LENGTH): values a query
only filters on may be larger than the result budget, but one never grows without bound."""
SQLITE_READS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE})
SQLITE_ACTIONS = {getattr(sqlite3, f"SQLITE_{n}"): n for n in (
    "INSERT", "UPDATE", "DELETE", "PRAGMA", "ATTACH", "DETACH", "TRANSACTION", "SAVEPOINT", "CREATE_TABLE",
    "CREATE_TEMP_TABLE", "CREATE_VIEW", "CREATE_INDEX", "DROP_TABLE", "ALTER_TABLE", "ANALYZE", "REINDEX",
    "CREATE_VTABLE", "CREATE_TRIGGER")}


class ResultTooLargeError(ToolError):
    default_code = ErrorCode.TOOL_RESULT_TOO_LARGE

    def __init__(self, message: str, *, code: ErrorCode | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, recoverable=False, details=details)


@dataclass(frozen=True, slots=True)
class Limits:
    rows: int
    bytes: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Fetched:
    rows: list[dict[str, Any]]
    truncated: bool
    """More rows were there than ``Limits.rows``."""
    size: int
    """Bytes of the rows as JSON."""


def execute(engine: sa.Engine, numbered: Numbered, policy: SqlPolicy, limits: Limits) -> Fetched:
    """Run a checked statement and fetch its rows within ``limits`` (blocking)."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            return _on_sqlite(_driver(conn), numbered, policy, limits)
        return _on_postgres(conn, numbered, limits)


def collect(rows: Iterable[Mapping[str, Any]], limits: Limits) -> Fetched:
    """Rows as JSON values, counting their JSON bytes as they arrive; past ``limits.bytes`` it fails."""
    kept: list[dict[str, Any]] = []
    size = 2
    for row in rows:
        if len(kept) == limits.rows:
            return Fetched(kept, True, size)
        text = dumps(dict(row))
        size += len(text.encode()) + (1 if kept else 0)
        if size > limits.bytes:
            raise too_large(limits.bytes, len(kept) + 1)
        kept.append(orjson.loads(text))
    return Fetched(kept, False, size)


class Counted:
    """Counts the rows a driver hands out: an error while reading the next one is about row ``seen + 1``."""

    def __init__(self) -> None:
        self.seen = 0

    def over(self, rows: Iterable[Any]) -> Iterator[Any]:
        for row in rows:
            self.seen += 1
            yield row


def too_large(limit: int, row: int) -> ResultTooLargeError:
    return ResultTooLargeError(f"the query result is larger than mcp.max-result-bytes ({limit} bytes as JSON) at row "
                               f"{row}; select fewer or smaller columns or rows")


# --- PostgreSQL ------------------------------------------------------------------------


def _driver(conn: sa.Connection) -> Any:
    driver = conn.connection.driver_connection
    assert driver is not None, "a checked-out connection has its DBAPI connection"
    return driver


def _on_postgres(conn: sa.Connection, numbered: Numbered, limits: Limits) -> Fetched:
    import psycopg
    from psycopg.rows import dict_row

    driver = _driver(conn)
    counted = Counted()
    try:
        begin_read_only(driver, limits.timeout_ms)
        cursor = psycopg.RawCursor(driver, row_factory=dict_row)
        stream = cursor.stream(row_bounded(numbered.postgres, limits.bytes), numbered.values)
        # psycopg types stream() as an Iterator; it is a generator, so it has close()
        with cursor, closing(stream) as rows:  # type: ignore[type-var]
            return collect(counted.over(rows), limits)
    except psycopg.Error as exc:
        if ROW_TOO_LARGE in str(exc):
            raise too_large(limits.bytes, counted.seen + 1) from None
        raise _postgres_error(exc, limits.timeout_ms) from exc
    finally:
        if not reset_session(driver):
            conn.invalidate()


def row_bounded(statement: str, max_bytes: int) -> str:
    """The checked statement wrapped so that PostgreSQL fails a row whose text is over ``max_bytes``
    before sending it: one huge value (a doubling recursive CTE) never reaches this process's memory.
    The statement is a complete parsed query; the line breaks keep a trailing ``--`` comment inside."""
    size = "octet_length(ce_row::text)"
    return (f"SELECT ce_row.* FROM (\n{statement}\n) AS ce_row WHERE CASE WHEN {size} <= {int(max_bytes)} THEN true "
            f"ELSE ('{ROW_TOO_LARGE}: ' || {size})::int = 0 END")


class PgDriver(Protocol):
    """What the read-only session needs of a psycopg connection (psycopg, the postgres extra, is imported
    only when a tool query runs on PostgreSQL)."""

    autocommit: bool

    def rollback(self) -> None: ...

    def execute(self, query: str, /) -> object: ...


def begin_read_only(driver: PgDriver, timeout_ms: int) -> None:
    """A READ ONLY transaction with a statement timeout (psycopg sends BEGIN with the first statement)."""
    driver.rollback()
    driver.autocommit = False
    driver.execute(f"SET TRANSACTION READ ONLY; SET LOCAL statement_timeout = {int(timeout_ms)}; "
                   "SET LOCAL standard_conforming_strings = on")


def reset_session(driver: PgDriver) -> bool:
    """Roll back, then ``DISCARD ALL``; False when the session could not be cleared."""
    import psycopg

    try:
        driver.rollback()
        driver.autocommit = True
        driver.execute("DISCARD ALL")
        driver.autocommit = False
        return True
    except psycopg.Error:
        return False


def _postgres_error(exc: Exception, timeout_ms: int) -> ToolError:
    import psycopg

    text = _first_line(exc)
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return ToolError(f"the query ran longer than {timeout_ms} ms and was stopped")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return UnsafeSqlError(f"the database refused a write in a read-only query: {text}")
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return UnsafeSqlError(f"the database refused the query: {text}")
    if "multiple commands" in text:
        return UnsafeSqlError(f"only one statement is allowed (the database refused: {text})")
    return ToolError(f"the query failed: {text}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- SQLite ----------------------------------------------------------------------------


class SqliteAuthorizer:
    """Allows reads and allowed functions; remembers why it refused the first thing it refused."""

    def __init__(self, policy: SqlPolicy) -> None:
        self.policy = policy
        self.refused: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
        if action in SQLITE_READS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ and not (arg1 or "").lower().startswith("sqlite_"):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and self.policy.allows_sqlite_function(arg2 or ""):
            return sqlite3.SQLITE_OK
        self.refused = self.refused or self._reason(action, arg1, arg2)
        return sqlite3.SQLITE_DENY

    def _reason(self, action: int, arg1: str | None, arg2: str | None) -> str:
        if action == sqlite3.SQLITE_FUNCTION:
            return self.policy.refusal(arg2 or "")
        if action == sqlite3.SQLITE_READ:
            return f"system catalog {arg1} is not readable by tool SQL"
        name = SQLITE_ACTIONS.get(action, f"action {action}")
        return f"{name} {arg1 or ''} is not allowed: tool SQL may only read".replace("  ", " ")


def _on_sqlite(raw: sqlite3.Connection, numbered: Numbered, policy: SqlPolicy, limits: Limits) -> Fetched:
    authorizer = SqliteAuthorizer(policy)
    counted = Counted()
    raw.execute("PRAGMA query_only = ON")
    length = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(limits.bytes, SQLITE_MAX_VALUE_BYTES))
    raw.set_authorizer(authorizer)
    raw.set_progress_handler(_deadline(limits.timeout_ms), 10_000)
    cursor: sqlite3.Cursor | None = None
    try:
        cursor = raw.execute(numbered.sqlite, numbered.values)
        names = [column[0] for column in cursor.description or ()]
        return collect((dict(zip(names, row, strict=True)) for row in counted.over(cursor)), limits)
    except sqlite3.Error as exc:
        if "too big" in str(exc) and not authorizer.refused:
            raise too_large(limits.bytes, counted.seen + 1) from None
        raise _sqlite_error(exc, authorizer, limits.timeout_ms) from exc
    finally:
        if cursor is not None:
            cursor.close()
        raw.set_authorizer(None)
        raw.set_progress_handler(None, 0)
        raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
        raw.execute("PRAGMA query_only = OFF")


def _deadline(timeout_ms: int) -> Callable[[], int]:
    deadline = time.monotonic() + timeout_ms / 1000
    return lambda: 1 if time.monotonic() > deadline else 0


def _sqlite_error(exc: sqlite3.Error, authorizer: SqliteAuthorizer, timeout_ms: int) -> ToolError:
    text = _first_line(exc)
    lowered = text.lower()
    if authorizer.refused:
        return UnsafeSqlError(authorizer.refused)
    if "interrupted" in lowered:
        return ToolError(f"the query ran longer than {timeout_ms} ms and was stopped")
    if "readonly" in lowered or "read-only" in lowered:
        return UnsafeSqlError(f"the database refused a write in a read-only query: {text}")
    if "one statement at a time" in lowered:
        return UnsafeSqlError("only one statement is allowed")
    return ToolError(f"the query failed: {text}")
