"""User feedback on answers (ConvEngine's ``ce_mcp_user_feedback``): checked input, the stored row, its reads.

A feedback row records a thumbs-up or thumbs-down with the turn it was given on: the conversation's
intent, state, last user text and answer (the caller's copy of the answer when it sends one), the
last MCP tool the turn observed and the caller's metadata. Everything a caller sends is bounded here
before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from convengine._internal.turn_io import check_params
from convengine.audit.events import AuditEvent
from convengine.catalog import stages
from convengine.catalog.errors import InvalidInputError
from convengine.catalog.vocab import FEEDBACK_TYPES
from convengine.db.models import CeConversationHistory, CeMcpUserFeedback

FEEDBACK = CeMcpUserFeedback.__table__
HISTORY = CeConversationHistory.__table__
FEEDBACK_STAGE = stages.MCP_USER_FEEDBACK
"""The audit stage of a stored feedback (ConvEngine's name)."""
MAX_MESSAGE_ID_CHARS = 128
MAX_RESPONSE_CHARS = 100_000
MAX_METADATA_BYTES = 64 * 1024
MAX_CODE_CHARS = 255
SAVED = "Feedback saved."


@dataclass(frozen=True, slots=True)
class FeedbackRequest:
    """A caller's feedback, checked."""

    conversation_id: str
    feedback_type: str
    message_id: str | None = None
    assistant_response: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Feedback:
    """One stored ``ce_mcp_user_feedback`` row."""

    feedback_id: int
    conversation_id: str
    feedback_type: str
    message_id: str | None
    intent_code: str | None
    state_code: str | None
    user_query: str | None
    assistant_response: str | None
    mcp_tool_code: str | None
    captured_query_knowledge_count: int
    applied_query_knowledge: list[Any]
    metadata: dict[str, Any]
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The row with ConvEngine's (camelCase) field names."""
        return {"feedbackId": self.feedback_id, "conversationId": self.conversation_id,
                "feedbackType": self.feedback_type, "messageId": self.message_id, "intentCode": self.intent_code,
                "stateCode": self.state_code, "userQuery": self.user_query,
                "assistantResponse": self.assistant_response, "mcpToolCode": self.mcp_tool_code,
                "capturedQueryKnowledgeCount": self.captured_query_knowledge_count,
                "appliedQueryKnowledgeJson": json.dumps(self.applied_query_knowledge),
                "metadataJson": json.dumps(self.metadata, ensure_ascii=False),
                "createdAt": self.created_at.isoformat()}

    def response(self) -> dict[str, Any]:
        """ConvEngine's reply to ``POST /feedback``."""
        return {"success": True, "feedbackId": self.feedback_id,
                "capturedQueryKnowledgeCount": self.captured_query_knowledge_count,
                "capturedUserQueryKnowledgeCount": 0, "embeddedUserQueryKnowledgeCount": 0, "message": SAVED}


def check_feedback(conversation_id: str, feedback_type: object, message_id: object = None,
                   assistant_response: object = None, metadata: object = None, *, max_depth: int) -> FeedbackRequest:
    """The checked request, or InvalidInputError naming the field that was wrong."""
    if not isinstance(feedback_type, str) or feedback_type.strip().upper() not in FEEDBACK_TYPES:
        shown = feedback_type if isinstance(feedback_type, str) else type(feedback_type).__name__
        raise InvalidInputError(f"feedbackType must be THUMBS_UP or THUMBS_DOWN, got {str(shown)[:40]!r}")
    message_id = _text(message_id, "messageId", MAX_MESSAGE_ID_CHARS)
    assistant_response = _text(assistant_response, "assistantResponse", MAX_RESPONSE_CHARS)
    checked = check_params(metadata, max_depth, name="metadata")
    size = len(json.dumps(checked, ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    for text in _strings(checked):
        _no_nul(text, "metadata")
    return FeedbackRequest(conversation_id, feedback_type.strip().upper(), message_id, assistant_response, checked)


def _text(value: object, name: str, limit: int) -> str | None:
    """An optional text field: trimmed, blank -> None, within ``limit`` characters, storable."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be text, got {type(value).__name__}")
    value = value.strip()
    if len(value) > limit:
        raise InvalidInputError(f"{name} is {len(value)} characters; the limit is {limit}")
    _no_nul(value, name)
    return value or None


def _strings(value: object) -> list[str]:
    """Every key and string value in a (depth-checked) JSON value."""
    found: list[str] = []
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            found.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


def _no_nul(text: str, name: str) -> None:
    """PostgreSQL text cannot hold NUL or lone surrogates: refuse them rather than fail at the write."""
    if "\x00" in text:
        raise InvalidInputError(f"{name} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{name} is not valid Unicode text") from None


def build_row(request: FeedbackRequest, projection: Mapping[str, Any]) -> dict[str, Any]:
    """The row to insert: the request plus what the conversation's latest turn holds."""
    return {"conversation_id": request.conversation_id, "feedback_type": request.feedback_type,
            "message_id": request.message_id, "intent_code": _code(projection.get("intent_code")),
            "state_code": _code(projection.get("state_code")),
            "user_query": _clip(projection.get("last_user_text")),
            "assistant_response": request.assistant_response or _answer(projection.get("last_assistant_json")),
            "mcp_tool_code": _code(_last_tool(projection.get("context_json"))),
            "captured_query_knowledge_count": 0, "applied_query_knowledge_json": [],
            "metadata_json": request.metadata, "created_at": datetime.now(UTC)}


def _code(value: object) -> str | None:
    return str(value)[:MAX_CODE_CHARS] if value not in (None, "") else None


def _clip(value: object) -> str | None:
    return None if value is None else str(value)[:MAX_RESPONSE_CHARS] or None


def _answer(stored: object) -> str | None:
    """The text of the last answer (``{type, value}``'s value), else its JSON, as ConvEngine reads it."""
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return _clip(stored)
    if isinstance(stored, Mapping) and isinstance(stored.get("value"), str) and stored["value"].strip():
        return _clip(stored["value"])
    return None if stored is None else _clip(json.dumps(stored, ensure_ascii=False, default=str))


def _last_tool(context: object) -> str | None:
    if isinstance(context, str):
        try:
            context = json.loads(context)
        except ValueError:
            return None
    mcp = context.get("mcp") if isinstance(context, Mapping) else None
    observations = mcp.get("observations") if isinstance(mcp, Mapping) else None
    for item in reversed(observations if isinstance(observations, list) else []):
        if isinstance(item, Mapping) and item.get("toolCode"):
            return str(item["toolCode"])
    return None


def insert(conn: sa.Connection, row: dict[str, Any]) -> int:
    return int(conn.execute(sa.insert(FEEDBACK).values(**row).returning(FEEDBACK.c.feedback_id)).scalar_one())


def turn_count(conn: sa.Connection, conversation_id: str) -> int:
    """How many turns the conversation has completed (its history rows): the turn the feedback is on."""
    query = sa.select(sa.func.count()).select_from(HISTORY).where(HISTORY.c.conversation_id == conversation_id)
    return int(conn.execute(query).scalar_one())


def audit_event(feedback: Feedback, turn: int, *, persist_meta: bool) -> AuditEvent:
    payload = {"conversation_id": feedback.conversation_id, "feedback_type": feedback.feedback_type,
               "message_id": feedback.message_id, "captured_query_knowledge_count": 0,
               "captured_user_query_knowledge_count": 0, "embedded_user_query_knowledge_count": 0,
               "feedback_id": feedback.feedback_id, "turn": turn, "intent": feedback.intent_code,
               "state": feedback.state_code}
    meta = None
    if persist_meta:
        meta = {"stage": FEEDBACK_STAGE, "conversationId": feedback.conversation_id,
                "emittedAt": feedback.created_at.isoformat(), "intent": feedback.intent_code,
                "state": feedback.state_code, "step": None}
    return AuditEvent(feedback.conversation_id, FEEDBACK_STAGE, payload, feedback.created_at, None, meta)


def from_row(row: Mapping[str, Any]) -> Feedback:
    applied = row.get("applied_query_knowledge_json")
    metadata = row.get("metadata_json")
    return Feedback(int(row["feedback_id"]), str(row["conversation_id"]), row["feedback_type"], row["message_id"],
                    row["intent_code"], row["state_code"], row["user_query"], row["assistant_response"],
                    row["mcp_tool_code"], int(row["captured_query_knowledge_count"] or 0),
                    _loaded(applied, list), _loaded(metadata, dict), _utc(row["created_at"]))


T = TypeVar("T", list[Any], dict[str, Any])


def _loaded(value: object, kind: type[T]) -> T:
    """A JSON column as ``kind`` (rows ConvEngine wrote may hold text or anything else)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return kind()
    return value if isinstance(value, kind) else kind()


def _utc(value: str | datetime) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
