"""Adopting a conversation that has a ``ce_conversation`` row but no checkpoint.

Such a row was written by ConvEngine (a database moved over) or by the Studio graph on the same
database. Its first turn here continues it, as ConvEngine's session would: intent, state and
context (with the clarification and intent lock ConvEngine keeps inside it) and the input params
come from the row, the turn number continues after its ``ce_conversation_history`` rows, and the
newest of those rows become the recent turns prompts see.

The row is stored bytes, so untrusted: each JSON column is read as text and parsed here; a value
that is not a JSON object, is larger than :data:`MAX_JSON_CHARS` or nests deeper than the API
allows is replaced by ``{}`` and named in the audit; engine-computed param keys are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine._internal.turn_io import nesting_depth
from convengine.catalog import params as pk
from convengine.catalog.state import caller_params
from convengine.db import turn_connection
from convengine.db.models import CeConversation, CeConversationHistory

MAX_JSON_CHARS = 1_000_000
CONVERSATION = CeConversation.__table__
HISTORY = CeConversationHistory.__table__


@dataclass
class Adopted:
    intent: str
    state: str
    context: dict[str, Any]
    input_params: dict[str, Any]
    turns: int
    recent_turns: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)
    schema_id: int | None = None
    """ConvEngine's sticky ``schema_id`` param (the schema chosen while collecting), when it was an id."""

    def audit_payload(self) -> dict[str, Any]:
        return {"intent": self.intent, "state": self.state, "turns": self.turns,
                "contextKeys": sorted(self.context), "inputParamKeys": sorted(self.input_params),
                "problems": self.problems}


async def find(engine: AsyncEngine, conversation_id: str, *, recent: int, max_depth: int) -> Adopted | None:
    """The conversation's row as a continuation, or None when it has no row (read on the running
    turn's connection: a turn never waits for a second connection of its pool)."""
    async with turn_connection.reading(engine) as conn:
        row = (await conn.execute(_row_query(conversation_id))).first()
        if row is None:
            return None
        turns = (await conn.execute(sa.select(sa.func.count()).select_from(HISTORY)
                                    .where(HISTORY.c.conversation_id == conversation_id))).scalar_one()
        window = (await conn.execute(_recent_query(conversation_id, recent))).all()
    problems: list[str] = []
    context = _object(row.context, "context_json", max_depth, problems)
    raw_params = _object(row.params, "input_params_json", max_depth, problems)
    params, dropped = caller_params(raw_params)
    if dropped:
        problems.append(f"input_params_json: engine-computed keys dropped: {', '.join(dropped)}")
    return Adopted(row.intent or "UNKNOWN", row.state or "UNKNOWN", context, params, int(turns),
                   [_recent(r, max_depth) for r in reversed(window)], problems, _schema_id(raw_params))


def _schema_id(params: dict[str, Any]) -> int | None:
    value = params.get(pk.SCHEMA_ID)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 19 else None


def _row_query(conversation_id: str) -> sa.Select[Any]:
    return sa.select(CONVERSATION.c.intent_code.label("intent"), CONVERSATION.c.state_code.label("state"),
                     sa.cast(CONVERSATION.c.context_json, sa.Text).label("context"),
                     sa.cast(CONVERSATION.c.input_params_json, sa.Text).label("params")
                     ).where(CONVERSATION.c.conversation_id == conversation_id)


def _recent_query(conversation_id: str, recent: int) -> sa.Select[Any]:
    return (sa.select(HISTORY.c.user_input, sa.cast(HISTORY.c.assistant_output, sa.Text).label("assistant"))
            .where(HISTORY.c.conversation_id == conversation_id)
            .order_by(HISTORY.c.history_id.desc()).limit(recent))


def _recent(row: sa.Row[Any], max_depth: int) -> dict[str, Any]:
    assistant = _parse(row.assistant, max_depth)
    return {"user": row.user_input, "assistant": assistant if assistant is not None else row.assistant}


def _object(text: str | None, column: str, max_depth: int, problems: list[str]) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    value = _parse(text, max_depth)
    if isinstance(value, dict):
        return value
    problems.append(f"{column}: not a JSON object within {MAX_JSON_CHARS} characters and {max_depth} levels; "
                    "adopted as {}")
    return {}


def _parse(text: str | None, max_depth: int) -> Any:
    """JSON text as a value, or None when it is missing, malformed, too large or too deep."""
    if text is None or len(text) > MAX_JSON_CHARS:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        return _parse(value, max_depth)  # ConvEngine's JSON held as a JSON string
    return value if nesting_depth(value, max_depth + 1) <= max_depth else None
