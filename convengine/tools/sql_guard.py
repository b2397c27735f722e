"""Read-only SQL for DB tools: identifier placeholders with allow-lists, and a statement guard.

Values never enter SQL text: they are bound as ``:named`` parameters. Identifiers (``${table}``)
must look like ``name`` or ``schema.name`` and, when the row has an allow-list for them, be in
it. The guard accepts exactly one SELECT/WITH statement: comments stripped, no stacked
statements, no ``SELECT ... INTO`` or locking clauses, no data-changing keywords, no blocked
functions (and, with an allow-list, only allowed ones).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from convengine.errors import ErrorCode, ToolError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$")
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

BLOCKED_KEYWORDS = frozenset({
    "insert", "update", "delete", "drop", "truncate", "alter", "create", "merge", "grant", "revoke", "comment",
    "vacuum", "analyze", "call", "execute", "do", "copy", "refresh", "reindex", "cluster", "discard", "lock",
    "attach", "detach", "pragma", "notify", "listen", "prepare", "deallocate",
})
BLOCKED_FUNCTIONS = frozenset({
    "pg_sleep", "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export",
    "dblink", "dblink_exec", "pg_terminate_backend", "pg_cancel_backend", "set_config", "pg_advisory_lock",
    "pg_advisory_xact_lock", "load_extension", "readfile", "writefile", "query_to_xml", "pg_reload_conf",
})
DEFAULT_ALLOWED_FUNCTIONS = frozenset({
    "abs", "avg", "ceil", "coalesce", "concat", "count", "current_date", "current_time", "current_timestamp",
    "date_trunc", "extract", "floor", "greatest", "least", "length", "lower", "ltrim", "max", "min", "now",
    "nullif", "replace", "round", "rtrim", "split_part", "string_agg", "substring", "substr", "sum", "to_char",
    "to_date", "to_timestamp", "trim", "upper",
})
# Words followed by "(" that are SQL syntax, not function calls.
NOT_FUNCTIONS = frozenset({
    "in", "exists", "values", "as", "over", "filter", "cast", "any", "all", "some", "on", "using", "and", "or",
    "not", "select", "from", "where", "join", "with", "union", "intersect", "except", "lateral", "between", "when",
    "then", "else", "case", "is", "by", "partition", "within", "group", "limit", "offset", "distinct", "row",
    "array", "interval", "recursive", "like", "ilike",
})


class UnsafeSqlError(ToolError):
    default_code = ErrorCode.UNSAFE_SQL

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, recoverable=False, **kwargs)


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
class Scanned:
    """SQL with string literals and quoted identifiers blanked out, comments removed."""

    code: str
    original: str


def scan(sql: str) -> Scanned:
    """Strip comments and blank out literals so keywords are only searched in code."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise UnsafeSqlError("unterminated /* comment */ in SQL")
            i = end + 2
            out.append(" ")
        elif ch in "'\"`":
            i = _skip_quoted(sql, i, ch)
            out.append(" ? ")
        elif ch == "$" and i + 1 < n and (sql[i + 1] == "$" or sql[i + 1].isalpha()) and _dollar_tag(sql, i):
            raise UnsafeSqlError("dollar-quoted strings are not allowed in tool SQL")
        else:
            out.append(ch)
            i += 1
    return Scanned("".join(out), sql)


def _skip_quoted(sql: str, start: int, quote: str) -> int:
    i = start + 1
    while i < len(sql):
        if sql[i] == quote:
            if i + 1 < len(sql) and sql[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    raise UnsafeSqlError(f"unterminated {quote} quote in SQL")


def _dollar_tag(sql: str, start: int) -> bool:
    return re.match(r"\$[A-Za-z_]*\$", sql[start:]) is not None


def check_read_only(sql: str, *, blocked_keywords: Iterable[str] = (), blocked_functions: Iterable[str] = (),
                    allowed_functions: Iterable[str] = ()) -> str:
    """Return the statement (without a trailing ``;``) if it is one read-only query.

    Raises:
        UnsafeSqlError: naming what was refused.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise UnsafeSqlError("SQL must be a non-empty string")
    code = scan(sql).code.strip()
    body = code[:-1].rstrip() if code.endswith(";") else code
    if ";" in body:
        raise UnsafeSqlError("only one statement is allowed (found ';' before the end)")
    words = [w.lower() for w in WORD.findall(body)]
    if not words or words[0] not in ("select", "with"):
        raise UnsafeSqlError(f"only SELECT or WITH queries are allowed, got {words[0].upper() if words else 'nothing'}")
    _check_words(words, set(BLOCKED_KEYWORDS) | {k.lower() for k in blocked_keywords})
    _check_functions(body, {f.lower() for f in blocked_functions}, {f.lower() for f in allowed_functions})
    return sql.strip().rstrip(";").rstrip()


def _check_words(words: list[str], blocked: set[str]) -> None:
    for index, word in enumerate(words):
        if word in blocked:
            raise UnsafeSqlError(f"keyword {word.upper()} is not allowed in a read-only query")
        if word == "into" and "select" in words[:index]:
            raise UnsafeSqlError("SELECT ... INTO is not allowed")
        if word == "for" and index + 1 < len(words) and words[index + 1] in ("update", "share", "no", "key"):
            raise UnsafeSqlError("locking clauses (FOR UPDATE / FOR SHARE) are not allowed")


def _check_functions(code: str, blocked: set[str], allowed: set[str]) -> None:
    for match in re.finditer(r"([A-Za-z_][A-Za-z0-9_$.]*)\s*\(", code):
        name = match.group(1).lower().rsplit(".", 1)[-1]
        if name in NOT_FUNCTIONS:
            continue
        if name in BLOCKED_FUNCTIONS or name in blocked:
            raise UnsafeSqlError(f"function {name}() is not allowed in tool SQL")
        if allowed and name not in DEFAULT_ALLOWED_FUNCTIONS | allowed:
            raise UnsafeSqlError(f"function {name}() is not in the allowed function list")


def bound_names(sql: str) -> list[str]:
    """``:named`` parameters in code (not inside literals, not ``::casts``)."""
    code = scan(sql).code
    return list(dict.fromkeys(re.findall(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)", code)))
