"""What the console reads from the database: the conversation list and the LLM call log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.db.models import CeConversation, CeMcpUserFeedback
from convengine.engine import recording
from convengine.engine.core import Engine

CONVERSATION = CeConversation.__table__
FEEDBACK = CeMcpUserFeedback.__table__
MAX_LIST = 200
SEARCH_MAX_CHARS = 200


def _database(engine: Engine) -> AsyncEngine:
    """The engine's async SQLAlchemy engine (the one place the console reaches into the runtime)."""
    return engine.runtime.store.engine


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


FeedbackFilter = Literal["ANY", "NONE", "THUMBS_UP", "THUMBS_DOWN"]
"""``feedback=`` of the list: conversations with any feedback, with none, or with one of this type."""


def _feedback_filter(feedback: str) -> Any:
    given = sa.exists().where(FEEDBACK.c.conversation_id == CONVERSATION.c.conversation_id)
    if feedback == "ANY":
        return given
    if feedback == "NONE":
        return ~given
    return given.where(FEEDBACK.c.feedback_type == feedback)


def _utc(value: datetime) -> datetime:
    """``value`` in UTC, as activity times are kept (SQLite compares them as text); no zone: UTC already."""
    return value if value.tzinfo is None else value.astimezone(UTC)


def _filters(feedback: str | None, since: datetime | None, until: datetime | None) -> list[Any]:
    """The list's filters: feedback (one of :data:`FEEDBACK_FILTERS`) and last activity in [since, until)."""
    active = sa.func.coalesce(CONVERSATION.c.updated_at, CONVERSATION.c.created_at)
    found = [_feedback_filter(feedback)] if feedback else []
    if since is not None:
        found.append(active >= sa.bindparam(None, _utc(since), type_=CONVERSATION.c.updated_at.type))
    if until is not None:
        found.append(active < sa.bindparam(None, _utc(until), type_=CONVERSATION.c.updated_at.type))
    return found


async def conversations(engine: Engine, search: str = "", limit: int = 50, *, feedback: str | None = None,
                        since: datetime | None = None, until: datetime | None = None) -> list[dict[str, Any]]:
    """The latest conversations, newest first; ``search`` matches (case-insensitively) the id,
    user, intent, state, status, lifecycle or latest feedback type; ``feedback`` and ``since`` /
    ``until`` (last activity) narrow the list."""
    limit = max(1, min(int(limit), MAX_LIST))
    latest = (sa.select(FEEDBACK.c.feedback_type).where(FEEDBACK.c.conversation_id == CONVERSATION.c.conversation_id)
              .order_by(FEEDBACK.c.feedback_id.desc()).limit(1).scalar_subquery())
    query = sa.select(CONVERSATION.c.conversation_id, CONVERSATION.c.user_id, CONVERSATION.c.intent_code,
                      CONVERSATION.c.state_code, CONVERSATION.c.status, CONVERSATION.c.lifecycle,
                      CONVERSATION.c.created_at, CONVERSATION.c.updated_at, CONVERSATION.c.last_user_text,
                      latest.label("feedback"))
    text = search.strip()[:SEARCH_MAX_CHARS]
    if "\x00" in text:
        return []  # no stored text holds NUL (PostgreSQL text cannot), so nothing matches
    if text:
        pattern = "%" + text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        columns = [sa.cast(CONVERSATION.c.conversation_id, sa.Text), CONVERSATION.c.user_id, CONVERSATION.c.intent_code,
                   CONVERSATION.c.state_code, CONVERSATION.c.status, CONVERSATION.c.lifecycle, latest]
        query = query.where(sa.or_(*(sa.func.lower(sa.func.coalesce(c, "")).like(pattern, escape="\\")
                                     for c in columns)))
    query = query.where(*_filters(feedback, since, until))
    query = query.order_by(CONVERSATION.c.updated_at.desc().nullslast(), CONVERSATION.c.created_at.desc()).limit(limit)
    async with _database(engine).connect() as conn:
        rows = (await conn.execute(query)).all()
    return [{"conversationId": str(r.conversation_id), "userId": r.user_id, "intent": r.intent_code,
             "state": r.state_code, "status": r.status, "lifecycle": r.lifecycle, "createdAt": _iso(r.created_at),
             "updatedAt": _iso(r.updated_at), "lastUserText": r.last_user_text, "feedback": r.feedback}
            for r in rows]


async def llm_log(engine: Engine, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's ``ce_llm_call_log`` rows in the order they were written (empty when
    ``llm.log_calls`` is off)."""
    return await recording.llm_log(_database(engine), conversation_id)
