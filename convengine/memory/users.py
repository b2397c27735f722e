"""Who a conversation belongs to: the end user's id, checked and stored once."""

from __future__ import annotations

from typing import Any

from convengine.errors import InvalidInputError

MAX_USER_ID_CHARS = 200


def check_user_id(value: Any, name: str = "user_id") -> str | None:
    """None, or a non-empty string of at most MAX_USER_ID_CHARS printable characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > MAX_USER_ID_CHARS:
        raise InvalidInputError(f"{name} must be a non-empty string of at most {MAX_USER_ID_CHARS} characters")
    if any(not ch.isprintable() for ch in value):
        raise InvalidInputError(f"{name} must not contain control characters")
    return value
