"""The read-only SQL guard and identifier placeholders, on their own."""

from __future__ import annotations

import pytest

from convengine.tools.sql_guard import UnsafeSqlError, bound_names, check_read_only, substitute_identifiers

ACCEPTED = [
    "SELECT * FROM orders",
    "select id from orders where note = 'DROP TABLE x; --' ;",
    "WITH recent AS (SELECT * FROM orders) SELECT count(*) FROM recent",
    'SELECT "update" FROM t',
    "SELECT coalesce(a, b) FROM t WHERE x IN (1, 2) AND EXISTS (SELECT 1)",
    "SELECT a::text FROM t WHERE b = :b",
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_read_only_queries_pass(sql: str) -> None:
    assert check_read_only(sql).lower().startswith(("select", "with"))


REFUSED = [
    ("SELECT 1; SELECT 2", "only one statement"),
    ("UPDATE orders SET status = 'x'", "only SELECT or WITH"),
    ("SELECT * FROM orders WHERE id = 1 OR 1=1; DROP TABLE orders", "only one statement"),
    ("SELECT * FROM t /* ; */ ; DELETE FROM t", "only one statement"),
    ("SELECT * FROM t -- harmless\n; INSERT INTO t VALUES (1)", "only one statement"),
    ("SELECT * FROM t FOR SHARE", "locking clauses"),
    ("SELECT * FROM t FOR NO KEY UPDATE", "locking clauses"),
    ("WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x", "keyword INSERT"),
    ("SELECT lo_import('/etc/passwd')", "function lo_import()"),
    ("SELECT pg_catalog.pg_read_file('x')", "function pg_read_file()"),
    ("SELECT 1 /* unterminated", "unterminated /* comment"),
    ('SELECT "open', "unterminated \" quote"),
    ("SELECT $tag$ x $tag$", "dollar-quoted"),
    ("   ", "non-empty"),
    ("EXPLAIN ANALYZE SELECT 1", "only SELECT or WITH"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED)
def test_anything_else_is_refused_with_a_reason(sql: str, message: str) -> None:
    with pytest.raises(UnsafeSqlError) as info:
        check_read_only(sql)
    assert message in info.value.message


def test_identifiers_are_checked_and_allow_listed() -> None:
    template = "SELECT * FROM ${schema}.${table} WHERE id = :id"
    allowed = {"table": ["orders"], "schema": ["public", "sales"]}
    assert substitute_identifiers(template, {"schema": "sales", "table": "ORDERS"}, allowed) == \
        "SELECT * FROM sales.ORDERS WHERE id = :id"
    for args, message in [({"schema": "sales", "table": "users"}, "Identifier not allowed for ${table}"),
                          ({"schema": "sales", "table": "orders o, users"}, "Unsafe identifier"),
                          ({"schema": "sales", "table": '"orders"'}, "Unsafe identifier"),
                          ({"schema": "sales"}, "no value for identifier ${table}")]:
        with pytest.raises(UnsafeSqlError, match=message.replace("$", r"\$").replace("{", r"\{").replace("}", r"\}")):
            substitute_identifiers(template, args, allowed)


def test_bound_names_ignore_literals_and_casts() -> None:
    assert bound_names("SELECT a::text FROM t WHERE b = :b AND c = ':not_me' AND d IN :ds") == ["b", "ds"]
