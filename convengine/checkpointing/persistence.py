"""ConversationStore: the ce_conversation projection, ce_conversation_history and the audit trail.

The checkpointer is the source of truth for conversation continuity; these tables are the
queryable projection (written once per turn with the turn's audit batch) and the logs.
Writes are plain synchronous SQLAlchemy, run in one worker-thread hop on SQLite and through
``run_sync`` on the PostgreSQL connection that holds the conversation's lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from convengine._internal.jsontext import dumps
from convengine.audit import packing
from convengine.audit.events import AuditEvent, expand_meta
from convengine.checkpointing.bound import commit_turn_connection
from convengine.checkpointing.hops import run_on_turn
from convengine.db import turn_connection
from convengine.db.models import CeAudit, CeAuditTurn, CeConversation, CeConversationHistory, CeLlmCallLog

CONVERSATION = CeConversation.__table__
HISTORY = CeConversationHistory.__table__
AUDIT = CeAudit.__table__
AUDIT_TURN = CeAuditTurn.__table__
LLM_LOG = CeLlmCallLog.__table__

_ROWS_PG = ("SELECT {cid}, r.at, r.events FROM unnest(%(ats)s::timestamptz[], %(packed)s::bytea[]) "
            "WITH ORDINALITY AS r(at, events, idx) ORDER BY r.idx")
_AUDIT_INSERT_PG = ("INSERT INTO ce_audit_turn (conversation_id, created_at, events) "
                    + _ROWS_PG.format(cid="%(cid)s::uuid"))
# A whole turn in one round trip: projection upsert, history row, the turn's audit row, and (with
# conversation memory) the conversation's user and lifecycle in the upsert and the rows of ``TurnExtra.ctes``.
_UP_PG = (
    "WITH up AS (INSERT INTO ce_conversation (conversation_id, status, intent_code, state_code, context_json, "
    "last_user_text, last_assistant_json, input_params_json, created_at, updated_at, owner_id{cols}) VALUES (%(cid)s, "
    "%(status)s, %(intent)s, %(state)s, %(context)s::jsonb, %(user)s, %(assistant)s::jsonb, %(params)s::jsonb, "
    "%(now)s, %(now)s, %(owner)s{values}) "
    "ON CONFLICT (conversation_id) DO UPDATE SET status = EXCLUDED.status, intent_code = EXCLUDED.intent_code, "
    "state_code = EXCLUDED.state_code, context_json = EXCLUDED.context_json, last_user_text = EXCLUDED.last_user_text, "
    "last_assistant_json = EXCLUDED.last_assistant_json, input_params_json = EXCLUDED.input_params_json, "
    "updated_at = EXCLUDED.updated_at{sets} RETURNING conversation_id), "
    "hist AS (INSERT INTO ce_conversation_history (conversation_id, user_input, assistant_output, created_at, "
    "modified_at) SELECT conversation_id, %(user)s, %(assistant)s::jsonb, %(now)s, %(now)s FROM up "
    "RETURNING history_id), "
)
_AUDIT_PG = "INSERT INTO ce_audit_turn (conversation_id, created_at, events) " + _ROWS_PG.format(
    cid="(SELECT conversation_id FROM up)")
_TURN_PG = _UP_PG.format(cols="", values="", sets="").removesuffix(", ") + " " + _AUDIT_PG
_TURN_MEMORY_PG = _UP_PG.format(
    cols=", user_id, lifecycle", values=", %(user_id)s, %(lifecycle)s",
    sets=", user_id = coalesce(ce_conversation.user_id, EXCLUDED.user_id), lifecycle = EXCLUDED.lifecycle")


_AUDIT_INSERT_SQLITE = "INSERT INTO ce_audit_turn (conversation_id, created_at, events) VALUES (?, ?, ?)"
_PROJECTION_COLUMNS = ("status", "intent_code", "state_code", "context_json", "last_user_text", "last_assistant_json",
                       "input_params_json")
_UPSERT_SQLITE = (
    f"INSERT INTO ce_conversation (conversation_id, {', '.join(_PROJECTION_COLUMNS)}, created_at, updated_at, "
    "owner_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*_PROJECTION_COLUMNS, "updated_at"))
)
_HISTORY_SQLITE = ("INSERT INTO ce_conversation_history (conversation_id, user_input, assistant_output, created_at, "
                   "modified_at) VALUES (?, ?, ?, ?, ?)")

Write = Callable[[sa.Connection], None]


_dumps = dumps


@dataclass(frozen=True)
class TurnExtra:
    """What conversation memory writes with a completed turn.

    On PostgreSQL it is part of the turn's one statement: the conversation's user (set once) and
    lifecycle in its upsert, then the CTEs ``ctes()`` gives (data-modifying, named, comma-separated, that
    may read the ``hist`` CTE's ``history_id``) with their parameters. Elsewhere ``write`` runs after the
    turn's rows, in the same transaction. ``after`` runs last on every backend."""

    write: Write
    user_id: str | None
    lifecycle: str | None
    ctes: Callable[[], tuple[str, dict[str, Any]]]
    after: Write | None = None

    def followed_by(self, after: Write | None) -> TurnExtra:
        """These rows, then ``after`` (statements of its own) in the same transaction."""
        return replace(self, after=after)


def sqlite_time(value: datetime) -> str:
    """SQLAlchemy's SQLite DateTime text format (naive UTC, microseconds)."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    return postgresql.insert(table) if conn.dialect.name == "postgresql" else sqlite.insert(table)


# --- synchronous writes (one implementation for both backends) ---------------------------


def insert_conversation(conn: sa.Connection, conversation_id: str, user_text: str | None = None,
                        owner: str | None = None) -> None:
    """The row of a new conversation (UNKNOWN/UNKNOWN, owned by ``owner``); nothing if it exists."""
    now = datetime.now(UTC)
    conn.execute(_insert(conn, CONVERSATION).values(
        conversation_id=conversation_id, status="RUNNING", intent_code="UNKNOWN", state_code="UNKNOWN",
        context_json={}, input_params_json={}, last_user_text=user_text, created_at=now, updated_at=now,
        owner_id=owner,
    ).on_conflict_do_nothing(index_elements=["conversation_id"]))


def _packed(events: Sequence[AuditEvent]) -> list[tuple[datetime, bytes]]:
    """The turn's audit rows: its events packed, one row per :data:`packing.EVENTS_PER_ROW`."""
    trail = packing.packable(events)
    if trail is not None:  # a turn's own trail packs what it recorded
        return trail.pack_rows(_dumps)
    return [packing.pack(chunk, _dumps) for chunk in packing.chunks(events)]


def _pg_rows(events: Sequence[AuditEvent]) -> dict[str, Any]:
    rows = _packed(events)
    return {"ats": [at for at, _ in rows], "packed": [value for _, value in rows]}


def insert_events(conn: sa.Connection, events: Sequence[AuditEvent]) -> None:
    """The audit batch in one statement: one ``ce_audit_turn`` row (per conversation, per
    :data:`packing.EVENTS_PER_ROW` events), where ``ce_audit`` took a row per event."""
    by_conversation: dict[str, Sequence[AuditEvent]] = {}
    trail = packing.packable(events)
    if trail is not None:
        if events:
            by_conversation[trail.conversation_id] = events
    else:
        for event in events:
            by_conversation.setdefault(event.conversation_id, []).append(event)  # type: ignore[attr-defined]
    for cid, own in by_conversation.items():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(_AUDIT_INSERT_PG, {"cid": cid, **_pg_rows(own)})
        else:
            conn.exec_driver_sql(_AUDIT_INSERT_SQLITE, [(cid, sqlite_time(at), value) for at, value in _packed(own)])


def _turn_postgres(conn: sa.Connection, projection: dict[str, Any], history: dict[str, Any],
                   events: Sequence[AuditEvent], owner: str | None, extra: TurnExtra | None = None) -> None:
    sql, more = _TURN_PG, {}
    if extra is not None:
        ctes, params = extra.ctes()
        sql = _TURN_MEMORY_PG + ctes + " " + _AUDIT_PG
        more = {**params, "user_id": extra.user_id, "lifecycle": extra.lifecycle}
    conn.exec_driver_sql(sql, {**more,
        "cid": projection["conversation_id"], "status": projection["status"], "intent": projection["intent_code"],
        "state": projection["state_code"], "context": _dumps(projection["context_json"]),
        "user": projection["last_user_text"], "assistant": _dumps(projection["last_assistant_json"]),
        "params": _dumps(projection["input_params_json"]), "now": datetime.now(UTC), "owner": owner,
        **_pg_rows(events)})


def _turn_sqlite(conn: sa.Connection, projection: dict[str, Any], history: dict[str, Any],
                 events: Sequence[AuditEvent], owner: str | None) -> None:
    """The same three writes as on PostgreSQL, as prepared driver statements (no statement building)."""
    now = sqlite_time(datetime.now(UTC))
    cid = projection["conversation_id"]
    values = [_dumps(projection[c]) if c.endswith("_json") and projection[c] is not None else projection[c]
              for c in _PROJECTION_COLUMNS]
    conn.exec_driver_sql(_UPSERT_SQLITE, (cid, *values, now, now, owner))
    assistant = history.get("assistant_output")
    conn.exec_driver_sql(_HISTORY_SQLITE, (history["conversation_id"], history["user_input"],
                                           None if assistant is None else _dumps(assistant), now, now))
    insert_events(conn, events)


def turn_writes(projection: dict[str, Any] | None, history: dict[str, Any] | None,
                events: Sequence[AuditEvent], conversation_id: str, owner: str | None = None,
                extra: TurnExtra | None = None) -> Write:
    """A completed turn (projection and history, as persist_conversation prepares them together) with its
    audit batch and ``extra``; without them (a failed turn) just the conversation row, if new, and the audit batch."""
    def write(conn: sa.Connection) -> None:
        if projection is not None and history is not None:
            if conn.dialect.name == "postgresql":
                _turn_postgres(conn, projection, history, events, owner, extra)
            else:
                _turn_sqlite(conn, projection, history, events, owner)
                if extra is not None:
                    extra.write(conn)
            if extra is not None and extra.after is not None:
                extra.after(conn)
            return
        insert_conversation(conn, conversation_id, owner=owner)
        insert_events(conn, events)

    return write


def _then(first: Write, second: Write) -> Write:
    def write(conn: sa.Connection) -> None:
        first(conn)
        second(conn)

    return write


class ConversationStore:
    """Reads and writes of the runtime ce_* tables."""

    def __init__(self, engine: AsyncEngine, sync_engine: sa.Engine) -> None:
        self.engine = engine
        self.sync_engine = sync_engine

    async def run(self, write: Write, conn: AsyncConnection | None = None) -> None:
        """Run ``write`` in a transaction: on ``conn`` (caller commits); inside a running turn, in the
        turn's commit (or with its failure audit), never on a second connection of the turn's pool;
        else in a fresh transaction."""
        if conn is not None:
            await run_on_turn(conn, write)
        elif turn_connection.defer(self.engine, write):
            return
        elif self.sync_engine.dialect.name == "sqlite":
            await asyncio.to_thread(self._sync_tx, write)
        else:
            async with self.engine.begin() as own:
                await own.run_sync(write)

    def _sync_tx(self, write: Write) -> None:
        with self.sync_engine.begin() as conn:
            write(conn)

    async def ensure_conversation(self, conversation_id: str, *, user_text: str | None = None,
                                  owner: str | None = None) -> None:
        await self.run(lambda c: insert_conversation(c, conversation_id, user_text, owner))

    async def commit_turn(self, conn: AsyncConnection | None, *, conversation_id: str,
                          projection: dict[str, Any] | None, history: dict[str, Any] | None,
                          events: Sequence[AuditEvent], owner: str | None = None,
                          extra: TurnExtra | None = None) -> None:
        """Projection upsert (a new row owned by ``owner``), history row and audit batch in one
        transaction: on ``conn`` with the turn's checkpoint, then committed. ``extra`` (conversation
        memory: user, lifecycle, step row) is written in the same transaction (on PostgreSQL, in the
        same statement)."""
        await self.run(turn_writes(projection, history, events, conversation_id, owner, extra), conn)
        if conn is not None:
            await commit_turn_connection(conn)

    async def write_failure(self, conversation_id: str, events: Sequence[AuditEvent],
                            owner: str | None = None, extra: Write | None = None) -> None:
        """A failed turn's audit (the conversation row is created, owned by ``owner``, if the first turn failed)."""
        write = turn_writes(None, None, events, conversation_id, owner)
        await self.run(write if extra is None else _then(write, extra))

    async def write_llm_calls(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return

        def insert(c: sa.Connection) -> None:
            c.execute(sa.insert(LLM_LOG), list(rows))

        await self.run(insert)

    # --- reads ------------------------------------------------------------------------

    async def exists(self, conversation_id: str) -> bool:
        async with self.engine.begin() as conn:
            found = await conn.execute(sa.select(CONVERSATION.c.conversation_id)
                                       .where(CONVERSATION.c.conversation_id == conversation_id))
            return found.first() is not None

    async def ownership(self, conversation_id: str,
                        conn: AsyncConnection | None = None) -> tuple[bool, str | None]:
        """Whether the conversation's row exists, and its owner (on ``conn``, e.g. under the turn lock)."""
        query = sa.select(CONVERSATION.c.owner_id).where(CONVERSATION.c.conversation_id == conversation_id)
        if conn is not None:
            row = (await conn.execute(query)).first()
        else:
            async with self.engine.begin() as own:
                row = (await own.execute(query)).first()
        return row is not None, (row[0] if row is not None else None)

    async def projection(self, conversation_id: str) -> dict[str, Any] | None:
        async with self.engine.begin() as conn:
            row = (await conn.execute(sa.select(CONVERSATION).where(
                CONVERSATION.c.conversation_id == conversation_id))).first()
        return dict(row._mapping) if row else None

    async def audit(self, conversation_id: str) -> list[AuditEvent]:
        """The conversation's events, oldest first: its ``ce_audit`` rows (one per event, written before
        migration 0011), then its ``ce_audit_turn`` rows unpacked (see :mod:`convengine.audit.packing`)."""
        async with self.engine.begin() as conn:
            rows = await conn.execute(sa.select(AUDIT).where(AUDIT.c.conversation_id == conversation_id)
                                      .order_by(AUDIT.c.audit_id))
            events = [_event(r._mapping) for r in rows]
            packed = await conn.execute(sa.select(AUDIT_TURN).where(AUDIT_TURN.c.conversation_id == conversation_id)
                                        .order_by(AUDIT_TURN.c.audit_turn_id))
            for row in packed:
                events += packing.unpack(row.audit_turn_id, str(row.conversation_id), row.created_at, row.events)
            return events

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        async with self.engine.begin() as conn:
            rows = await conn.execute(sa.select(HISTORY).where(HISTORY.c.conversation_id == conversation_id)
                                      .order_by(HISTORY.c.history_id))
            return [dict(r._mapping) for r in rows]


def _event(row: Any) -> AuditEvent:
    payload = dict(row["payload_json"] or {})
    stored = payload.pop("_meta", None)
    cid, created = str(row["conversation_id"]), row["created_at"]
    meta = None if stored is None else expand_meta(stored, row["stage"], cid, created, payload)
    turn_id = (meta or {}).get("turnId")
    return AuditEvent(cid, row["stage"], payload, created, (meta or {}).get("step"), meta, row["audit_id"],
                      turn_id if isinstance(turn_id, str) else None)
