"""Tool SQL as PostgreSQL's own scanner sees it (pglast): ``:name`` parameters and their numbering.

PostgreSQL's grammar has no ``:name`` parameters: its scanner reads ``:`` then a name. A name
written right after a lone ``:`` (not ``::``, not after a word character) is a parameter, as in
SQLAlchemy's ``text()``; it becomes `` $n `` for PostgreSQL and `` ?n `` for SQLite at exactly
that token's place, so the text the guard parses is the text the database runs. Literals,
quoted identifiers and comments are tokens of their own, so a ``:name`` inside them is text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pglast import parser
from pglast.parser import ParseError

from convengine.catalog.errors import ErrorCode, ToolError

MAX_SQL_CHARS = 100_000
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
COLON, SEMICOLON = "ASCII_58", "ASCII_59"
COMMENTS = frozenset({"SQL_COMMENT", "C_COMMENT"})


class UnsafeSqlError(ToolError):
    """Tool SQL refused before it ran (or refused by the database as a write)."""

    default_code = ErrorCode.UNSAFE_SQL

    def __init__(self, message: str, *, code: ErrorCode | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, recoverable=False, details=details)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    """The scanner's token name (``IDENT``, ``SCONST``, ``SELECT``, ``ASCII_58``...)."""
    keyword: bool
    start: int
    end: int
    """Exclusive."""
    text: str


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Numbered:
    """One statement with its ``:name`` parameters numbered."""

    postgres: str
    sqlite: str
    values: list[Any]


def tokens(sql: str) -> list[Token]:
    """The statement's tokens, comments included.

    Raises:
        UnsafeSqlError: empty, too long, or not even scannable (an unterminated literal...).
    """
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSqlError("SQL must be a non-empty string")
    if len(sql) > MAX_SQL_CHARS:
        raise UnsafeSqlError(f"SQL is {len(sql)} characters long; tool SQL may have at most {MAX_SQL_CHARS}")
    try:
        scanned = parser.scan(sql)
    except ParseError as exc:
        raise UnsafeSqlError(f"SQL does not parse: {exc}") from None
    return [Token(t.name, t.kind != "NO_KEYWORD", t.start, t.end + 1, sql[t.start:t.end + 1]) for t in scanned]


def params(sql: str, toks: Sequence[Token]) -> list[Param]:
    """Every ``:name`` occurrence, in order."""
    found = []
    for colon, name in pairwise(toks):
        if colon.kind == COLON and name.start == colon.end and NAME.fullmatch(name.text) and _free(sql, colon.start):
            found.append(Param(name.text, colon.start, name.end))
    return found


def _free(sql: str, colon: int) -> bool:
    return colon == 0 or not (sql[colon - 1].isalnum() or sql[colon - 1] in "_$:")


def bound_names(sql: str) -> list[str]:
    """``:named`` parameters in code (not inside literals or comments, not ``::casts``)."""
    return list(dict.fromkeys(p.name for p in params(sql, tokens(sql))))


def statement_text(sql: str, toks: Sequence[Token]) -> str:
    """The statement without surrounding blanks and one trailing ``;`` (comments after it too)."""
    code = [t for t in toks if t.kind not in COMMENTS]
    if code and code[-1].kind == SEMICOLON:
        return sql[:code[-1].start].strip()
    return sql.strip()


def number(sql: str, toks: Sequence[Token], values: Mapping[str, Any]) -> Numbered:
    """``sql`` with each ``:name`` replaced by numbered placeholders; a list becomes ``($1, $2...)``.

    Raises:
        ToolError: a parameter has no value, or is an empty list (INVALID_INPUT).
    """
    slots: dict[str, list[int]] = {}
    flat: list[Any] = []
    pieces: list[str | list[int]] = []
    position = 0
    for param in params(sql, toks):
        if param.name not in slots:
            slots[param.name] = _allocate(param.name, values, flat)
        pieces.extend([sql[position:param.start], slots[param.name]])
        position = param.end
    pieces.append(sql[position:])
    lists = {id(slots[n]) for n in slots if isinstance(values[n], (list, tuple))}
    return Numbered(_render(pieces, "$", lists), _render(pieces, "?", lists), flat)


def _allocate(name: str, values: Mapping[str, Any], flat: list[Any]) -> list[int]:
    if name not in values:
        raise ToolError(f"the query needs a value for :{name}", code=ErrorCode.INVALID_INPUT, recoverable=False)
    value = values[name]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ToolError(f":{name} is an empty list; give at least one value", code=ErrorCode.INVALID_INPUT,
                        recoverable=False)
    flat.extend(items)
    return list(range(len(flat) - len(items) + 1, len(flat) + 1))


def _render(pieces: list[str | list[int]], mark: str, lists: set[int]) -> str:
    """Placeholders get a blank on each side so they never merge with a neighbouring token."""
    out = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece)
        elif id(piece) in lists:
            out.append(" (" + ", ".join(f"{mark}{n}" for n in piece) + ") ")
        else:
            out.append(f" {mark}{piece[0]} ")
    return "".join(out)
