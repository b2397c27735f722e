"""Text a database can store: no NUL character (PostgreSQL text and jsonb cannot hold one) and no lone
surrogate (not encodable as UTF-8). Caller input is checked here, at the edge, so both backends refuse
the same request the same way (INVALID_INPUT naming the field) before anything is written."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from convengine.catalog.errors import InvalidInputError


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character (binary data is not accepted)"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode text ({exc.reason} at position {exc.start})"
    return None


def unstorable(value: object, name: str) -> str | None:
    """The first key or string in a JSON value that cannot be stored, as ``"<path> <why>"``; None if all can."""
    for where, text in _texts(value, name):
        problem = text_problem(text)
        if problem is not None:
            return f"{_spelled(where)} {problem}"
    return None


def check_storable(value: object, name: str) -> None:
    """InvalidInputError naming the first key or string of ``value`` that cannot be stored."""
    problem = unstorable(value, name)
    if problem is not None:
        raise InvalidInputError(problem)


REPLACEMENT = "\ufffd"
"""What an unstorable character of text the engine did not refuse at the edge becomes (a model's reply)."""


def storable_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD, so either backend can store it."""
    if text_problem(text) is None:
        return text
    return "".join(REPLACEMENT if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text)


def storable_value(value: object) -> Any:
    """A JSON value with :func:`storable_text` applied to every key and string (a fresh value if any changed)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {storable_text(k) if isinstance(k, str) else k: storable_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_value(v) for v in value]
    return value


Where = tuple[Any, ...]
"""A place in a value, spelt only when a problem is found there: ``(name,)``, or ``(parent, form, key)``
with form ``"."`` (a member), ``"key"`` (a member's own key) or ``"[]"`` (an item)."""


def _texts(value: object, name: str) -> Iterator[tuple[Where, str]]:
    """(where, text) of every key and string value, iteratively (the value is depth-checked or parsed JSON)."""
    pending: list[tuple[Where, object]] = [((name,), value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str):
                    yield (where, "key", key), key
                pending.append(((where, ".", key), child))
        elif isinstance(item, (list, tuple)):
            pending.extend(((where, "[]", i), child) for i, child in enumerate(item))


def _spelled(where: Where) -> str:
    """``where`` as a message shows it (``name.member[0] key 'k'``-style, keys made printable); iteratively,
    as a value may nest deeper than Python recurses."""
    parts: list[str] = []
    while len(where) == 3:
        where, form, key = where
        parts.append(f"[{key}]" if form == "[]" else f"{' key ' if form == 'key' else '.'}{_shown(key)}")
    return str(where[0]) + "".join(reversed(parts))


def _shown(key: object) -> str:
    """A key as it may appear in a message: printable, short, never the bad character itself."""
    text = str(key)
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[:40])
    return clean + ("..." if len(text) > 40 else "")
