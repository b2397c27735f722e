"""Who a conversation belongs to: the end user's id, checked and stored once."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

from convengine.catalog.errors import InvalidInputError

MAX_USER_ID_CHARS = 200
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})
"""Control, format (zero-width, bidirectional overrides), line/paragraph separator, surrogate and
private-use characters: refused in user ids."""


@functools.cache
def _invisible_class(categories: frozenset[str] = INVISIBLE_CATEGORIES) -> str:
    """A regex character class of every code point of ``categories`` (BMP as ``\\uXXXX``)."""
    ranges, start = [], None
    for cp in range(sys.maxunicode + 2):
        bad = cp <= sys.maxunicode and unicodedata.category(chr(cp)) in categories
        if bad and start is None:
            start = cp
        elif not bad and start is not None:
            ranges.append((start, cp - 1))
            start = None

    def char(cp: int) -> str:
        return f"\\u{cp:04x}" if cp <= 0xFFFF else chr(cp)

    return "".join(char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in ranges)


@functools.cache
def user_id_pattern(*, declared: bool = False) -> str:
    """What a user id must match: 1-200 characters, not all blank, none of them invisible. Built from the
    Unicode database on first use (it takes a fraction of a second).

    ``declared``: as the OpenAPI schema states it, without the surrogate range (a JSON Schema regex
    cannot name lone surrogates; they are not text and are refused all the same)."""
    categories = INVISIBLE_CATEGORIES - {"Cs"} if declared else INVISIBLE_CATEGORIES
    return f"^(?=.*\\S)[^{_invisible_class(categories)}]{{1,{MAX_USER_ID_CHARS}}}$"


@functools.cache
def _user_id() -> re.Pattern[str]:
    return re.compile(user_id_pattern())


def check_user_id(value: object, name: str = "user_id") -> str | None:
    """None, or a string matching :func:`user_id_pattern`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > MAX_USER_ID_CHARS:
        raise InvalidInputError(f"{name} must be a non-empty string of at most {MAX_USER_ID_CHARS} characters")
    if not _user_id().fullmatch(value):
        raise InvalidInputError(f"{name} must not contain control or invisible formatting characters")
    return value
