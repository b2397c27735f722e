"""Read-only SQL for DB tools: identifier placeholders with allow-lists, and a statement guard.

Values never enter SQL text: they are bound as ``:named`` parameters. Identifiers (``${table}``)
must look like ``name`` or ``schema.name`` and, when the row has an allow-list for them, be in
it. The guard parses the statement with PostgreSQL's own parser (pglast) and accepts exactly
one SELECT (or WITH whose every query only selects) whose parse tree holds nothing but reads
and allowed function calls (see :mod:`convengine.tools.sql_tree`). The database then runs the
very text that was parsed, over the extended protocol (PostgreSQL) or one prepared statement
under an authorizer (SQLite), so a second statement cannot run either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pglast
from pglast.parser import ParseError

from convengine.tools.sql_policy import DEFAULT_ALLOWED_FUNCTIONS, SqlPolicy
from convengine.tools.sql_tokens import (
    COMMENTS,
    Numbered,
    Token,
    UnsafeSqlError,
    bound_names,
    number,
    statement_text,
    tokens,
)
from convengine.tools.sql_tree import check_select

__all__ = ["DEFAULT_ALLOWED_FUNCTIONS", "Checked", "SqlPolicy", "UnsafeSqlError", "bound_names", "check_read_only",
           "prepare", "substitute_identifiers"]

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute_identifiers(template: str, args: Mapping[str, Any], allowed: Mapping[str, Iterable[str]] | None) -> str:
    """Replace ``${name}`` placeholders with checked identifiers."""
    allow = {str(k).lower(): {str(v).lower() for v in values} for k, values in (allowed or {}).items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        value = args.get(name)
        if value is None:
            raise UnsafeSqlError(f"no value for identifier ${{{name}}}")
        text = str(value)
        if not IDENTIFIER.match(text):
            raise UnsafeSqlError(f"Unsafe identifier for ${{{name}}}: {text!r} (expected name or schema.name)")
        if name.lower() in allow and text.lower() not in allow[name.lower()]:
            raise UnsafeSqlError(f"Identifier not allowed for ${{{name}}}: {text!r} "
                                 f"(allowed: {', '.join(sorted(allow[name.lower()]))})")
        return text

    return PLACEHOLDER.sub(replace, template)


@dataclass(frozen=True, slots=True)
class Checked:
    """A statement the guard accepted, ready to run."""

    statement: str
    """The SQL as written (``:names``), without a trailing ``;``."""
    numbered: Numbered
    """The same with numbered placeholders: the text that was parsed and that runs."""


def check_read_only(sql: str, *, blocked_keywords: Iterable[str] = (), blocked_functions: Iterable[str] = (),
                    allowed_functions: Iterable[str] = ()) -> str:
    """Return the statement (without a trailing ``;``) if it is one read-only query.

    Raises:
        UnsafeSqlError: naming what was refused.
    """
    policy = SqlPolicy.build(allowed=allowed_functions, blocked=blocked_functions, keywords=blocked_keywords)
    return prepare(sql, dict.fromkeys(bound_names(sql), 0), policy).statement


def prepare(sql: str, values: Mapping[str, Any], policy: SqlPolicy) -> Checked:
    """Check ``sql`` with its parameter ``values`` in place (lists expanded) and number its parameters.

    Raises:
        UnsafeSqlError: the statement is not one plain read, or uses what the policy refuses.
        ToolError: a ``:name`` has no value (INVALID_INPUT).
    """
    statement = statement_text(sql, tokens(sql))
    toks = tokens(statement)
    _check_tokens(toks, policy)
    numbered = number(statement, toks, values)
    _check_tree(numbered.postgres, toks, policy)
    return Checked(statement, numbered)


def _check_tokens(toks: list[Token], policy: SqlPolicy) -> None:
    for token in toks:
        if token.kind == "PARAM":
            raise UnsafeSqlError(f"positional parameter {token.text} is not allowed; bind values as :name")
        if token.kind == "SCONST" and token.text.startswith("$"):
            raise UnsafeSqlError("dollar-quoted strings are not allowed in tool SQL (use '...' literals)")
        if token.kind not in COMMENTS and (token.keyword or token.kind == "IDENT") \
                and token.text.lower() in policy.keywords:
            raise UnsafeSqlError(f"keyword {token.text.upper()} is not allowed in a read-only query")


def _check_tree(text: str, toks: list[Token], policy: SqlPolicy) -> None:
    try:
        statements = pglast.parse_sql(text)
    except ParseError as exc:
        raise UnsafeSqlError(f"SQL does not parse: {exc}") from None
    except RecursionError:
        raise UnsafeSqlError("SQL is nested too deeply") from None
    if len(statements) != 1:
        raise UnsafeSqlError(f"only one statement is allowed (found {len(statements)})")
    stmt = statements[0].stmt
    if not isinstance(stmt, pglast.ast.SelectStmt):
        raise UnsafeSqlError(f"only SELECT or WITH queries are allowed, got {_kind(stmt, toks)}")
    try:
        check_select(stmt, policy)
    except RecursionError:
        raise UnsafeSqlError("SQL is nested too deeply") from None


def _kind(stmt: object, toks: list[Token]) -> str:
    first = next((t.text.upper() for t in toks if t.kind not in COMMENTS), "nothing")
    if first != "WITH":
        return first
    return type(stmt).__name__.removesuffix("Stmt").upper()
