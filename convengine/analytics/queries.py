"""The SQL of :func:`stats`: a few GROUP BY queries over indexed time ranges, merged per group.

Turn numbers come from ``ce_conversation_step`` (one row per completed turn, with its stats columns),
conversation outcomes from ``ce_conversation`` (the projection of each conversation's last turn),
feedback from ``ce_mcp_user_feedback``. Nothing decodes an audit row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from convengine.analytics.model import Dimension, Stats, StatsQuery, StatsRow
from convengine.catalog.flows import HANDOFF_STATUS
from convengine.catalog.memory import Lifecycle
from convengine.catalog.vocab import THUMBS_DOWN, THUMBS_UP, UNKNOWN
from convengine.db.models import CeConversation, CeConversationStep, CeConversationVersion, CeMcpUserFeedback

STEP = CeConversationStep.__table__
CONVERSATION = CeConversation.__table__
FEEDBACK = CeMcpUserFeedback.__table__
VERSION = CeConversationVersion.__table__
Key = tuple[str | None, ...]
Column = sa.ColumnElement[Any]


def _day(column: Column, dialect: str) -> Column:
    """The UTC day of a timestamp as ``YYYY-MM-DD`` (SQLite keeps naive UTC text)."""
    if dialect == "postgresql":
        return sa.func.to_char(sa.func.timezone("UTC", column), "YYYY-MM-DD")
    return sa.func.substr(column, 1, 10)


def _dims(by: Sequence[Dimension], intent: Column, state: Column, time: Column, dialect: str) -> list[Column]:
    source = {"intent": intent, "state": state, "day": _day(time, dialect)}
    return [source[d].label(d) for d in by]


def _window(query: StatsQuery, time: Column) -> list[Column]:
    found: list[Column] = []
    if query.since is not None:
        found.append(time >= sa.bindparam(None, query.since, type_=STEP.c.created_at.type))
    if query.until is not None:
        found.append(time < sa.bindparam(None, query.until, type_=STEP.c.created_at.type))
    return found


def _scope(query: StatsQuery, conversation_id: Column) -> list[Column]:
    """Only the owner's conversations, and those on the version asked for."""
    found: list[Column] = []
    if query.owner is not None:
        found.append(conversation_id.in_(sa.select(CONVERSATION.c.conversation_id)
                                         .where(CONVERSATION.c.owner_id == query.owner)))
    if query.version is not None:
        found.append(sa.cast(conversation_id, sa.Text).in_(
            sa.select(VERSION.c.conversation_id).where(VERSION.c.version_no == query.version)))
    return found


def _count_if(condition: Column) -> Column:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def turn_query(query: StatsQuery, by: Sequence[Dimension], dialect: str) -> sa.Select[Any]:
    """Turns, conversations, fallbacks, UNKNOWN, handoffs and model calls per group."""
    dims = _dims(by, STEP.c.intent_code, STEP.c.state_code, STEP.c.created_at, dialect)
    handoff = sa.case((STEP.c.handoff == sa.true(), STEP.c.conversation_id), else_=None)
    select = sa.select(
        *dims, sa.func.count(sa.distinct(STEP.c.conversation_id)).label("conversations"),
        sa.func.count().label("turns"), _count_if(STEP.c.fallback == sa.true()).label("fallback_turns"),
        _count_if(STEP.c.intent_code == UNKNOWN).label("unknown_turns"),
        sa.func.count(sa.distinct(handoff)).label("handoffs"),
        sa.func.coalesce(sa.func.sum(STEP.c.llm_calls), 0).label("llm_calls"),
        sa.func.coalesce(sa.func.sum(STEP.c.input_tokens), 0).label("input_tokens"),
        sa.func.coalesce(sa.func.sum(STEP.c.output_tokens), 0).label("output_tokens"),
        sa.func.coalesce(sa.func.sum(STEP.c.llm_cost), 0.0).label("estimated_cost"))
    where = [STEP.c.undone == sa.false(), *_window(query, STEP.c.created_at), *_scope(query, STEP.c.conversation_id)]
    if query.intent is not None:
        where.append(STEP.c.intent_code == query.intent)
    return select.where(*where).group_by(*dims)


def _handed_off() -> sa.Exists:
    return sa.exists().where(STEP.c.conversation_id == CONVERSATION.c.conversation_id,
                             STEP.c.handoff == sa.true(), STEP.c.undone == sa.false())


def outcome_query(query: StatsQuery, by: Sequence[Dimension], dialect: str) -> sa.Select[Any]:
    """Per group of each conversation's last turn: ended, dropped off (idle), contained."""
    active = CONVERSATION.c.updated_at  # set by every turn's upsert; compared bare so its index bounds the window
    dims = _dims(by, CONVERSATION.c.intent_code, CONVERSATION.c.state_code, active, dialect)
    ended = CONVERSATION.c.lifecycle == Lifecycle.ENDED.value
    idle_cut = sa.bindparam(None, query.now - timedelta(seconds=query.idle_after_s), type_=STEP.c.created_at.type)
    dropped = sa.and_(~ended, CONVERSATION.c.status != HANDOFF_STATUS, active < idle_cut, ~_handed_off())
    select = sa.select(*dims, _count_if(ended).label("ended"), _count_if(dropped).label("dropped_off"),
                       _count_if(sa.and_(ended, ~_handed_off())).label("contained"))
    where = [CONVERSATION.c.lifecycle.in_([Lifecycle.IN_PROGRESS.value, Lifecycle.ENDED.value,
                                           Lifecycle.INTERRUPTED.value]),
             *_window(query, active), *_scope(query, CONVERSATION.c.conversation_id)]
    if query.intent is not None:
        where.append(CONVERSATION.c.intent_code == query.intent)
    return select.where(*where).group_by(*dims)


def feedback_query(query: StatsQuery, by: Sequence[Dimension], dialect: str) -> sa.Select[Any]:
    """Thumbs up and down per group of the turn they were given on."""
    dims = _dims(by, FEEDBACK.c.intent_code, FEEDBACK.c.state_code, FEEDBACK.c.created_at, dialect)
    select = sa.select(*dims, _count_if(FEEDBACK.c.feedback_type == THUMBS_UP).label("feedback_up"),
                       _count_if(FEEDBACK.c.feedback_type == THUMBS_DOWN).label("feedback_down"))
    where = [*_window(query, FEEDBACK.c.created_at), *_scope(query, FEEDBACK.c.conversation_id)]
    if query.intent is not None:
        where.append(FEEDBACK.c.intent_code == query.intent)
    return select.where(*where).group_by(*dims)


QUERIES = (turn_query, outcome_query, feedback_query)


def _grouped(conn: sa.Connection, query: StatsQuery, by: Sequence[Dimension]) -> dict[Key, dict[str, Any]]:
    merged: dict[Key, dict[str, Any]] = {}
    for build in QUERIES:
        for row in conn.execute(build(query, by, conn.dialect.name)):
            values = dict(row._mapping)
            key = tuple(None if values[d] is None else str(values[d]) for d in by)
            merged.setdefault(key, dict(zip(by, key, strict=True))).update(
                {k: v for k, v in values.items() if k not in by})
    return merged


def _row(values: dict[str, Any]) -> StatsRow:
    values = {k: (float(v) if k == "estimated_cost" else v) for k, v in values.items() if v is not None}
    return StatsRow.model_validate(values)


def _order(key: Key) -> tuple[tuple[bool, str], ...]:
    return tuple((part is None, part or "") for part in key)


def stats(database: sa.Engine, query: StatsQuery) -> Stats:
    """The numbers of ``query``: its total and one row per group of ``query.by`` (a blocking read: the
    engine runs it in a worker thread, as its SQLite writes, which costs less than the async driver)."""
    with database.connect() as conn:
        total = _grouped(conn, query, ()).get((), {})
        groups = _grouped(conn, query, query.by) if query.by else {}
    rows = [_row(groups[key]) for key in sorted(groups, key=_order)]
    return Stats(query=query, total=_row(total), rows=rows)
