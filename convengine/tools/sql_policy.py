"""Which functions tool SQL may call: an allow-list, the same on PostgreSQL and SQLite.

The list is ``DEFAULT_ALLOWED_FUNCTIONS`` plus ``mcp.db.allowed-functions`` minus
``mcp.db.blocked-functions``. A name matches unqualified or qualified with ``pg_catalog``; a
function of another schema must be listed with its schema (``reporting.fiscal_year``). Names are
compared exactly after PostgreSQL's folding: ``"LOWER"(x)`` is a different function from
``lower(x)`` and is refused. Functions with effects beyond the query (sleeping, locks, files,
settings, sequences, other connections) are not on the default list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from convengine.settings import DbSettings

DEFAULT_ALLOWED_FUNCTIONS = frozenset({
    "abs", "avg", "ceil", "coalesce", "concat", "count", "current_date", "current_time", "current_timestamp",
    "date_trunc", "extract", "floor", "greatest", "least", "length", "lower", "ltrim", "max", "min", "now",
    "nullif", "replace", "round", "rtrim", "split_part", "string_agg", "substring", "substr", "sum", "to_char",
    "to_date", "to_timestamp", "trim", "upper",
})
SYNTAX_FUNCTIONS = frozenset({
    "btrim", "timezone", "similar_to_escape", "overlay", "position", "normalize", "is_normalized",
    "pg_collation_for",
})
"""Built-ins PostgreSQL's grammar itself calls for SQL syntax (TRIM(...), AT TIME ZONE, SIMILAR TO...)."""
SQLITE_OPERATOR_FUNCTIONS = frozenset({"like", "glob", "->", "->>"})
"""Functions SQLite calls for operators (LIKE, GLOB, JSON arrows); PostgreSQL's are operators."""
EFFECTFUL_FUNCTIONS = frozenset({
    "pg_sleep", "pg_sleep_for", "pg_sleep_until", "pg_read_file", "pg_read_binary_file", "pg_ls_dir",
    "pg_stat_file", "lo_import", "lo_export", "lo_create", "lo_unlink", "lo_open", "lo_put", "dblink",
    "dblink_exec", "dblink_connect", "pg_terminate_backend", "pg_cancel_backend", "set_config",
    "pg_advisory_lock", "pg_advisory_xact_lock", "pg_try_advisory_lock", "pg_try_advisory_xact_lock",
    "pg_advisory_lock_shared", "pg_notify", "nextval", "setval", "txid_current", "pg_current_xact_id",
    "pg_reload_conf", "pg_rotate_logfile", "load_extension", "readfile", "writefile", "query_to_xml",
})
"""Named in refusals as having effects outside the query (none of them is on the default list)."""


def _folded(names: Iterable[str]) -> frozenset[str]:
    out = set()
    for name in names:
        text = str(name).strip().lower()
        out.add(text.removeprefix("pg_catalog."))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class SqlPolicy:
    functions: frozenset[str]
    """Allowed function names (``name`` or ``schema.name``), lower case."""
    blocked: frozenset[str]
    keywords: frozenset[str]
    """Configured words refused anywhere in the SQL's code (``mcp.db.blocked-keywords``)."""

    @classmethod
    def build(cls, *, allowed: Iterable[str] = (), blocked: Iterable[str] = (),
              keywords: Iterable[str] = ()) -> SqlPolicy:
        refused = _folded(blocked)
        return cls((DEFAULT_ALLOWED_FUNCTIONS | SYNTAX_FUNCTIONS | _folded(allowed)) - refused, refused,
                   _folded(keywords))

    @classmethod
    def of(cls, settings: DbSettings) -> SqlPolicy:
        """The policy of a ``DbSettings`` (``mcp.db``)."""
        return cls.build(allowed=settings.allowed_functions, blocked=settings.blocked_functions,
                         keywords=settings.blocked_keywords)

    def allows_function(self, name: Sequence[str]) -> bool:
        parts = list(name)
        if len(parts) == 2 and parts[0] == "pg_catalog":
            parts = parts[1:]
        return bool(parts) and ".".join(parts) in self.functions

    def allows_sqlite_function(self, name: str) -> bool:
        """SQLite folds function names to lower case itself."""
        folded = name.lower()
        return folded in self.functions or (folded in SQLITE_OPERATOR_FUNCTIONS and folded not in self.blocked)

    def refusal(self, name: str) -> str:
        bare = name.lower().removeprefix("pg_catalog.")
        if bare in EFFECTFUL_FUNCTIONS or bare in self.blocked:
            return f"function {bare}() is not allowed in tool SQL (not on the allowed function list)"
        return f"function {name}() is not in the allowed function list (mcp.db.allowed-functions)"
