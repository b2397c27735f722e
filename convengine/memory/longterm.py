"""Long-term properties: per-user values kept across conversations in LangGraph's store.

The official ``BaseStore`` implementations hold them (``AsyncSqliteStore`` / ``AsyncPostgresStore``,
tables created by their own ``setup()``), one item per property in the namespace of its user. A user belongs to the caller that names it: the
owner of the conversation (an API key's or tenant's identity) scopes it, so two callers naming the
same user id are two users. Host code (no owner) keeps ConvEngine's namespace
``("convengine", "users", <digest of the user id>, "properties")``; an owner's users live in
``("convengine", "owners", <digest of the owner>, "users", <digest of the user id>, "properties")``
(digests because store namespace labels may not contain dots). During a turn the store is bound to the turn's connection,
so what a turn saves commits or rolls back with its checkpoint and rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from langgraph.store.base import BaseStore, GetOp, Item, PutOp
from langgraph.store.sqlite.aio import AsyncSqliteStore
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.checkpointing.bound import driver_connection
from convengine.checkpointing.postgres import _set_up
from convengine.db.url import DatabaseUrl


def namespace(user_id: str, owner: str | None = None) -> tuple[str, ...]:
    """Where ``owner``'s user ``user_id`` keeps its properties (None: host code's users)."""
    if owner is None:
        return ("convengine", "users", _digest(user_id), "properties")
    return ("convengine", "owners", _digest(owner), "users", _digest(user_id), "properties")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


@asynccontextmanager
async def open_store(url: DatabaseUrl, saver: Any) -> AsyncIterator[BaseStore]:
    """The shared store (reads and erasure outside turns), set up; on PostgreSQL on the saver's pool."""
    if url.is_postgres:
        from langgraph.store.postgres.aio import AsyncPostgresStore


        store = AsyncPostgresStore(saver.conn)
        await _set_up(saver.conn, store)
        try:
            yield store
        finally:
            _stop(store)
        return

    assert url.sqlite_path is not None
    conn = await aiosqlite.connect(str(url.sqlite_path), timeout=30, isolation_level=None)
    try:
        await conn.execute("PRAGMA busy_timeout=30000")
        sqlite_store = AsyncSqliteStore(conn)
        await sqlite_store.setup()
        try:
            yield sqlite_store
        finally:
            _stop(sqlite_store)
    finally:
        await conn.close()


class _InTurnTransaction:
    """An aiosqlite connection on which the store's own BEGIN/COMMIT are left out: its statements
    join the turn's open transaction, which the turn commits once."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().upper() in ("BEGIN", "COMMIT"):
            return None
        return await self._conn.execute(sql, *args)

    async def commit(self) -> None:
        """Deferred: the turn commits."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@asynccontextmanager
async def bound(conn: AsyncConnection) -> AsyncIterator[BaseStore]:
    """The official store of the backend on the turn's connection (inside its transaction), for one use."""
    store = await _bound_store(conn)
    try:
        yield store
    finally:
        _stop(store)


def _stop(store: BaseStore) -> None:
    """End the store's background batching task (the official async stores start one each)."""
    task = getattr(store, "_task", None)
    if task is not None:
        task.cancel()


async def _bound_store(conn: AsyncConnection) -> BaseStore:
    raw = await driver_connection(conn)
    if conn.dialect.name == "postgresql":
        from langgraph.store.postgres.aio import AsyncPostgresStore

        return AsyncPostgresStore(raw)

    # _InTurnTransaction stands in for the aiosqlite.Connection it wraps (every other attribute is passed on)
    store = AsyncSqliteStore(_InTurnTransaction(raw))  # type: ignore[arg-type]
    store.is_setup = True
    return store


async def load(store: BaseStore, user_id: str, names: Iterable[str], owner: str | None = None) -> dict[str, Any]:
    """The user's stored values of ``names`` (absent ones left out)."""
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return {}
    items = await store.abatch([GetOp(namespace(user_id, owner), name) for name in wanted])
    # a GetOp's result is the Item or None
    return {name: item.value.get("value") for name, item in zip(wanted, items, strict=True) if isinstance(item, Item)}


async def save_changes(store: BaseStore, user_id: str, context: Mapping[str, Any],
                       names: Iterable[str], owner: str | None = None) -> dict[str, dict[str, Any]]:
    """Save the declared properties whose value in ``context`` differs from the stored one;
    ``{name: {before, after}}`` for each (None: absent)."""
    wanted = [n for n in dict.fromkeys(names) if n in context]
    if not wanted:
        return {}
    stored = await load(store, user_id, wanted, owner)
    changes = {n: {"before": stored.get(n), "after": context[n]} for n in wanted if stored.get(n) != context[n]}
    await put_values(store, user_id, {n: c["after"] for n, c in changes.items()}, owner)
    return changes


async def put_values(store: BaseStore, user_id: str, values: Mapping[str, Any], owner: str | None = None) -> None:
    """Set (or, for None, delete) properties."""
    if values:
        await store.abatch([PutOp(namespace(user_id, owner), name, None if value is None else {"value": value})
                            for name, value in values.items()])


async def read_all(store: BaseStore, user_id: str, owner: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    offset = 0
    while True:
        items = await store.asearch(namespace(user_id, owner), limit=500, offset=offset)
        found.update({item.key: item.value.get("value") for item in items})
        if len(items) < 500:
            return found
        offset += 500


async def forget(store: BaseStore, user_id: str, owner: str | None = None) -> int:
    """Delete every long-term property of the user; how many there were."""
    keys = list(await read_all(store, user_id, owner))
    if keys:
        await store.abatch([PutOp(namespace(user_id, owner), key, None) for key in keys])
    return len(keys)
