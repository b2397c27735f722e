"""ConversationStore: the ce_conversation projection, ce_conversation_history and ce_audit.

The checkpointer is the source of truth for conversation continuity; these tables are the
queryable projection (written once per turn with the turn's audit batch) and the logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from convengine.audit.events import AuditEvent
from convengine.db.models import CeAudit, CeConversation, CeConversationHistory, CeLlmCallLog

CONVERSATION = CeConversation.__table__
HISTORY = CeConversationHistory.__table__
AUDIT = CeAudit.__table__
LLM_LOG = CeLlmCallLog.__table__


def _insert(conn: AsyncConnection, table: sa.Table) -> Any:
    dialect = conn.dialect.name
    return (postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table))


class ConversationStore:
    """Reads and writes of the runtime ce_* tables on the async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def ensure_conversation(self, conversation_id: str, *, user_text: str | None = None,
                                  conn: AsyncConnection | None = None) -> None:
        """Insert the row of a new conversation (UNKNOWN/UNKNOWN); nothing if it exists."""
        if conn is None:
            async with self.engine.begin() as own:
                await self.ensure_conversation(conversation_id, user_text=user_text, conn=own)
            return
        now = datetime.now(UTC)
        stmt = _insert(conn, CONVERSATION).values(
            conversation_id=conversation_id, status="RUNNING", intent_code="UNKNOWN", state_code="UNKNOWN",
            context_json={}, input_params_json={}, last_user_text=user_text, created_at=now, updated_at=now,
        ).on_conflict_do_nothing(index_elements=["conversation_id"])
        await conn.execute(stmt)

    async def commit_turn(self, conn: AsyncConnection, *, projection: dict[str, Any] | None,
                          history: dict[str, Any] | None, events: Sequence[AuditEvent]) -> None:
        """Projection upsert, history row and audit batch, on ``conn`` (the caller commits)."""
        now = datetime.now(UTC)
        if projection is not None:
            await self._upsert(conn, {**projection, "updated_at": now, "created_at": now})
        else:
            await self.ensure_conversation(events[0].conversation_id if events else "", conn=conn)
        if history is not None:
            await conn.execute(sa.insert(HISTORY).values(**history, created_at=now, modified_at=now))
        await self.write_events(conn, events)

    async def _upsert(self, conn: AsyncConnection, row: dict[str, Any]) -> None:
        stmt = _insert(conn, CONVERSATION).values(**row)
        updates = {k: stmt.excluded[k] for k in row if k not in ("conversation_id", "created_at")}
        await conn.execute(stmt.on_conflict_do_update(index_elements=["conversation_id"], set_=updates))

    async def write_events(self, conn: AsyncConnection, events: Sequence[AuditEvent]) -> None:
        if not events:
            return
        rows = [{"conversation_id": e.conversation_id, "stage": e.stage, "payload_json": e.stored_payload(),
                 "created_at": e.created_at} for e in events]
        await conn.execute(sa.insert(AUDIT), rows)

    async def write_failure(self, conversation_id: str, events: Sequence[AuditEvent]) -> None:
        """A failed turn's audit (the conversation row is created if the first turn failed)."""
        async with self.engine.begin() as conn:
            await self.ensure_conversation(conversation_id, conn=conn)
            await self.write_events(conn, events)

    async def write_llm_calls(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            async with self.engine.begin() as conn:
                await conn.execute(sa.insert(LLM_LOG), list(rows))

    # --- reads ------------------------------------------------------------------------

    async def exists(self, conversation_id: str) -> bool:
        async with self.engine.connect() as conn:
            found = await conn.execute(sa.select(CONVERSATION.c.conversation_id)
                                       .where(CONVERSATION.c.conversation_id == conversation_id))
            return found.first() is not None

    async def projection(self, conversation_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.select(CONVERSATION).where(
                CONVERSATION.c.conversation_id == conversation_id))).first()
        return dict(row._mapping) if row else None

    async def audit(self, conversation_id: str) -> list[AuditEvent]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(sa.select(AUDIT).where(AUDIT.c.conversation_id == conversation_id)
                                      .order_by(AUDIT.c.audit_id))
            return [_event(r._mapping) for r in rows]

    async def history(self, conversation_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(sa.select(HISTORY).where(HISTORY.c.conversation_id == conversation_id)
                                      .order_by(HISTORY.c.history_id))
            return [dict(r._mapping) for r in rows]


def _event(row: Any) -> AuditEvent:
    payload = dict(row["payload_json"] or {})
    meta = payload.pop("_meta", None)
    return AuditEvent(str(row["conversation_id"]), row["stage"], payload, row["created_at"],
                      (meta or {}).get("step"), meta, row["audit_id"])
