"""The edges of a turn: checking what callers pass in, and turning failures into ConvEngine errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from convengine.audit.events import AuditEvent
from convengine.errors import (
    ConvEngineError,
    ErrorCode,
    InvalidConversationIdError,
    InvalidInputError,
    MessageTooLargeError,
    PersistenceError,
)


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """A checked request: text, conversation id (generated when absent), params, reset flag."""

    text: str
    conversation_id: str
    params: dict[str, Any] = field(default_factory=dict)
    reset: bool = False
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def normalise_conversation_id(value: Any) -> str:
    """A canonical UUID string, or InvalidConversationIdError naming the bad value."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if not isinstance(value, str):
        raise InvalidConversationIdError(f"conversation_id must be a UUID string, got {type(value).__name__}")
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InvalidConversationIdError(f"conversation_id {shown!r} is not a UUID") from None


def check_request(message: Any, conversation_id: Any, input_params: Any, reset: Any, settings: Any) -> TurnRequest:
    """Validate a caller's turn; raises InvalidInputError (or a subclass) naming what was wrong."""
    text = _check_message(message, settings.api.max_message_chars, bool(reset))
    cid = normalise_conversation_id(conversation_id) if conversation_id is not None else str(uuid.uuid4())
    if not isinstance(reset, bool):
        raise InvalidInputError(f"reset must be true or false, got {type(reset).__name__}")
    return TurnRequest(text, cid, _check_params(input_params), reset)


def _check_message(message: Any, limit: int, reset: bool) -> str:
    if isinstance(message, (bytes, bytearray)):
        raise InvalidInputError("message must be text (str), got bytes; decode it as UTF-8 first")
    if not isinstance(message, str):
        raise InvalidInputError(f"message must be text (str), got {type(message).__name__}")
    if len(message) > limit:
        raise MessageTooLargeError(f"message is {len(message)} characters; the limit is {limit} "
                                   "(settings.api.max_message_chars)")
    if "\x00" in message:
        raise InvalidInputError("message contains a NUL character (binary data is not accepted)")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"message is not valid Unicode text: {exc.reason} at position {exc.start}") from None
    if not message.strip() and not reset:
        raise InvalidInputError("message is empty")
    return message


def _check_params(params: Any) -> dict[str, Any]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidInputError(f"input_params must be an object (a mapping of name -> value), got "
                                f"{type(params).__name__}")
    bad = [k for k in params if not isinstance(k, str)]
    if bad:
        raise InvalidInputError(f"input_params keys must be strings, got {bad[0]!r}")
    try:
        return json.loads(json.dumps(dict(params), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"input_params must be JSON values: {exc}") from None


_DB_ERRORS: tuple[type[BaseException], ...] = (sa.exc.OperationalError, sa.exc.InterfaceError, OSError)


def map_failure(exc: BaseException) -> ConvEngineError:
    """Any failure -> a ConvEngineError with ConvEngine's code and recoverable flag."""
    if isinstance(exc, ConvEngineError):
        return exc
    if _is_database_error(exc):
        return PersistenceError(f"the database is unavailable: {_first_line(exc)}")
    return ConvEngineError(f"internal error: {type(exc).__name__}: {_first_line(exc)}", code=ErrorCode.INTERNAL_ERROR)


def _is_database_error(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _DB_ERRORS) or type(current).__module__.startswith(("psycopg", "sqlite3", "aiosqlite")):
            return True
        current = current.__cause__ or current.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def failure_event(conversation_id: str, error: ConvEngineError, *, known: bool) -> AuditEvent:
    stage = "ENGINE_KNOWN_FAILURE" if known else "ENGINE_UNKNOWN_FAILURE"
    return AuditEvent(conversation_id, stage, {**error.to_payload(), "step": error.details.get("step"),
                                               "details": {k: str(v) for k, v in error.details.items()}})
