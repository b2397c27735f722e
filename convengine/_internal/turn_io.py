"""The edges of a turn: checking what callers pass in, and turning failures into ConvEngine errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from convengine._internal import numbers
from convengine._internal.storable import check_storable
from convengine.audit.events import AuditEvent
from convengine.catalog.errors import (
    ConvEngineError,
    ErrorCode,
    InvalidConversationIdError,
    InvalidInputError,
    MessageTooLargeError,
    PersistenceError,
)
from convengine.security.redact import redact_error, redact_text, redact_value, scrub_chain
from convengine.security.users import check_user_id
from convengine.settings import DEFAULT_MAX_INPUT_DEPTH, EngineSettings


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """A checked request: text, conversation id (generated when absent), params, reset flag."""

    text: str
    conversation_id: str
    params: dict[str, Any] = field(default_factory=dict)
    reset: bool = False
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    event: str | None = None
    """A turn that is not a user message: ``welcome`` or ``handoff_resume`` (convengine.flows)."""
    user_id: str | None = None
    """The end user the conversation belongs to (stored with it on its first turn, never changed)."""


def normalise_conversation_id(value: object) -> str:
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


def check_request(message: object, conversation_id: object, input_params: object, reset: object,
                  settings: EngineSettings, user_id: object = None) -> TurnRequest:
    """Validate a caller's turn; raises InvalidInputError (or a subclass) naming what was wrong."""
    text = _check_message(message, settings.api.max_message_chars)
    cid = normalise_conversation_id(conversation_id) if conversation_id is not None else str(uuid.uuid4())
    if not isinstance(reset, bool):
        raise InvalidInputError(f"reset must be true or false, got {type(reset).__name__}")
    return TurnRequest(text, cid, check_params(input_params, settings.api.max_input_depth), reset,
                       user_id=check_user_id(user_id))


def _check_message(message: object, limit: int) -> str:
    """Any text within the limits, empty included: a silent submit (params only) is a turn whose text is ""."""
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
    return message


def check_params(params: object, max_depth: int = DEFAULT_MAX_INPUT_DEPTH, *, name: str = "input_params") -> dict[str, Any]:
    """A caller's params as plain JSON values, or InvalidInputError naming what was wrong."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidInputError(f"{name} must be an object (a mapping of name -> value), got "
                                f"{type(params).__name__}")
    bad = [k for k in params if not isinstance(k, str)]
    if bad:
        raise InvalidInputError(f"{name} keys must be strings, got {bad[0]!r}")
    depth = nesting_depth(params, max_depth + 1)
    if depth > max_depth:
        raise InvalidInputError(f"{name} nests deeper than {max_depth} levels (settings.api.max_input_depth)")
    check_storable(params, name)
    try:
        checked = json.loads(json.dumps(dict(params), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be JSON values: {exc}") from None
    if (big := numbers.first_out_of_range(checked)) is not None:
        raise InvalidInputError(f"{name} holds {numbers.shown(big)}, past {numbers.RANGE_TEXT}")
    return checked


def nesting_depth(value: object, stop_at: int) -> int:
    """How deeply lists and mappings nest in ``value`` (iterative; stops counting at ``stop_at``)."""
    deepest = 0
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if not isinstance(item, (Mapping, list, tuple)):
            continue
        deepest = max(deepest, depth)
        if deepest >= stop_at:
            return deepest
        children = item.values() if isinstance(item, Mapping) else item
        pending.extend((child, depth + 1) for child in children)
    return deepest


_UNAVAILABLE: tuple[type[BaseException], ...] = (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError,
                                                 OSError)
"""The database is down, unreachable or out of connections: retrying may succeed."""
_DRIVER_MODULES = ("psycopg", "psycopg_pool", "sqlite3", "aiosqlite", "sqlalchemy")
DATABASE_UNAVAILABLE_MESSAGE = "the database is unavailable or busy; retry later (the server log has the details)"
DATABASE_FAILED_MESSAGE = "a database statement failed (the server log has the details)"


def map_failure(exc: BaseException) -> ConvEngineError:
    """Any failure -> a ConvEngineError with ConvEngine's code and recoverable flag, secrets redacted
    (in the error and, as far as their text comes from their arguments, in the exceptions it chains).
    A database failure gets a fixed message: the driver's text (SQL, pool limits, server messages) is for
    the server log (:func:`database_detail`), never for the caller."""
    scrub_chain(exc)
    if isinstance(exc, ConvEngineError):
        return redact_error(exc)
    if database_error(exc) is not None:
        if is_database_unavailable(exc):
            return PersistenceError(DATABASE_UNAVAILABLE_MESSAGE)
        return ConvEngineError(f"internal error: {DATABASE_FAILED_MESSAGE}", code=ErrorCode.INTERNAL_ERROR)
    return ConvEngineError(f"internal error: {type(exc).__name__}: {_first_line(exc)}", code=ErrorCode.INTERNAL_ERROR)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def database_error(exc: BaseException) -> BaseException | None:
    """The database library's exception in ``exc``'s chain (SQLAlchemy, a driver, a pool), or None."""
    for current in _chain(exc):
        if isinstance(current, (sa.exc.SQLAlchemyError, *_UNAVAILABLE)) or \
                type(current).__module__.split(".")[0] in _DRIVER_MODULES:
            return current
    return None


def is_database_unavailable(exc: BaseException) -> bool:
    return any(isinstance(current, _UNAVAILABLE) or type(current).__module__.startswith(("psycopg", "sqlite3", "aiosqlite"))
               for current in _chain(exc))


def database_detail(exc: BaseException) -> str:
    """What the server log says of a (database) failure: the driver's exception and the first line of its
    message, redacted. Never the statement's parameters nor PostgreSQL's DETAIL/CONTEXT lines, which quote
    the caller's data."""
    found = database_error(exc) or exc
    return f"{type(found).__name__}: {_first_line(found)}"


def _first_line(exc: BaseException) -> str:
    text = redact_text(str(getattr(exc, "orig", None) or exc).strip())
    return text.splitlines()[0] if text else type(exc).__name__


def failure_event(conversation_id: str, error: ConvEngineError, *, known: bool) -> AuditEvent:
    stage = "ENGINE_KNOWN_FAILURE" if known else "ENGINE_UNKNOWN_FAILURE"
    payload = {**error.to_payload(), "step": error.details.get("step"),
               "details": {k: str(v) for k, v in error.details.items()}}
    return AuditEvent(conversation_id, stage, redact_value(payload))
