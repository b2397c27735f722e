"""Database work of a turn in one hop of aiosqlite's thread.

aiosqlite runs each driver call (cursor, execute, fetch, close) in its own thread, one queue hop
per call: SQLAlchemy's async adaptation of a turn's commit (projection, history, audit batch,
memory rows) cost about 25 hops on SQLite. :func:`run_on_turn` runs a whole synchronous block of
SQLAlchemy work in a single hop instead, on the same ``sqlite3`` connection and in the same
transaction as the turn's checkpoint. It leans on aiosqlite's ``Connection._execute`` (how every
aiosqlite call reaches its thread) and ``_conn``; without them it falls back to ``run_sync``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.checkpointing.bound import driver_connection

T = TypeVar("T")
_ENGINES: weakref.WeakKeyDictionary[Any, sa.Engine] = weakref.WeakKeyDictionary()
"""A synchronous engine over each aiosqlite connection's own ``sqlite3`` connection."""


async def run_on_turn(conn: AsyncConnection, work: Callable[[sa.Connection], T]) -> T:
    """``work`` on the turn's connection, in its transaction (which it neither commits nor rolls
    back): on SQLite in one hop of aiosqlite's thread, elsewhere through ``run_sync``."""
    if conn.dialect.name != "sqlite":
        return await conn.run_sync(work)
    raw = await driver_connection(conn)
    hop, sqlite_conn = _sqlite_hop(raw)
    if hop is None:
        return await conn.run_sync(work)
    engine = _ENGINES.get(raw)
    if engine is None:
        engine = _ENGINES[raw] = _engine_over(sqlite_conn)

    def block() -> T:
        with engine.connect() as sync:
            return work(sync)

    result: T = await hop(block)
    return result


def _sqlite_hop(raw: Any) -> tuple[Any, Any]:
    """aiosqlite's way to its thread and the ``sqlite3`` connection there, or (None, None) without them."""
    hop, sqlite_conn = getattr(raw, "_execute", None), getattr(raw, "_conn", None)
    return (hop, sqlite_conn) if hop is not None and sqlite_conn is not None else (None, None)


def _engine_over(sqlite_conn: Any) -> sa.Engine:
    """An engine whose one connection is ``sqlite_conn`` and which never ends its transaction: the
    turn's own connection commits or rolls it back (closing a SQLAlchemy connection would roll back)."""
    engine = sa.create_engine("sqlite://", creator=lambda: sqlite_conn, poolclass=sa.pool.StaticPool,
                              pool_reset_on_return=None)

    def keep(dbapi_connection: Any) -> None:
        del dbapi_connection

    engine.dialect.do_rollback = keep  # type: ignore[method-assign]
    engine.dialect.do_commit = keep  # type: ignore[method-assign]
    return engine


class Prepared:
    """A SELECT compiled once per dialect and run on the driver's connection, for a turn's hot reads.

    SQLAlchemy's execution (its context, its result and row objects) costs about 0.2 ms of CPU per
    statement even with the compiled form cached; the driver runs the same SQL in microseconds. Only
    statements whose parameters and columns need no type processing may be prepared (the values are
    passed and returned as the driver has them); anything else is refused when it is compiled.
    """

    def __init__(self, statement: sa.Select[Any], dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        converted = sorted(name for name, bind in compiled.binds.items()
                           if bind.type.dialect_impl(dialect).bind_processor(dialect) is not None)
        if converted:
            raise ValueError(f"parameters of this statement need SQLAlchemy's processing: {converted}")
        self.sql = str(compiled)
        self.constants = dict(compiled.params)
        self.order = tuple(compiled.positiontup or ()) if compiled.positional else None

    def parameters(self, values: dict[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        merged = {**self.constants, **values}
        return merged if self.order is None else tuple(merged[name] for name in self.order)


async def fetch_one(conn: AsyncConnection, prepared: Prepared, values: dict[str, Any]) -> tuple[Any, ...] | None:
    """The first row of ``prepared`` with ``values``, read in the turn's transaction on the driver's
    connection (on SQLite in one hop of aiosqlite's thread), as the driver returns it."""
    raw = await driver_connection(conn)
    params = prepared.parameters(values)
    hop: Any = None
    sqlite_conn: Any = None
    if conn.dialect.name == "sqlite":
        hop, sqlite_conn = _sqlite_hop(raw)
    if hop is not None:
        return cast(tuple[Any, ...] | None, await hop(lambda: sqlite_conn.execute(prepared.sql, params).fetchone()))
    cursor = await raw.execute(prepared.sql, params)  # psycopg, or aiosqlite without its internals
    return cast(tuple[Any, ...] | None, await cursor.fetchone())
