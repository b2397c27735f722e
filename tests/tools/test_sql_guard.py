"""The read-only SQL guard and identifier placeholders, on their own (PostgreSQL's parser, no database)."""

from __future__ import annotations

import pytest

from convengine.catalog.errors import ErrorCode, ToolError
from convengine.tools.sql_guard import (
    SqlPolicy,
    UnsafeSqlError,
    bound_names,
    check_read_only,
    prepare,
    substitute_identifiers,
)

ACCEPTED = [
    "SELECT * FROM orders",
    "select id from orders where note = 'DROP TABLE x; --' ;",
    "WITH recent AS (SELECT * FROM orders) SELECT count(*) FROM recent",
    'SELECT "update" FROM t',
    "SELECT coalesce(a, b) FROM t WHERE x IN (1, 2) AND EXISTS (SELECT 1)",
    "SELECT a::text FROM t WHERE b = :b",
    "SELECT E'it''s \\' ; DELETE FROM t' AS quoted",
    "SELECT U&'d\\0061t\\+000061' AS unicode",
    "SELECT pg_catalog.lower(name), upper(name) FROM t",
    "SELECT trim(both ' ' from name), extract(year from now()), substring(name from 1 for 2) FROM t",
    "SELECT count(*) FILTER (WHERE x > 1), max(x) OVER (PARTITION BY y ORDER BY z) FROM t",
    "SELECT CAST(x AS integer), x::numeric(10, 2), date '2024-01-01', now() - interval '1 day' FROM t",
    "SELECT * FROM t TABLESAMPLE BERNOULLI (10)",
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3) SELECT n FROM c",
    "VALUES (1, 'a'), (2, 'b')",
    "SELECT 1 -- a comment with ; DELETE FROM t\n",
    "SELECT x FROM t WHERE name LIKE 'a%' OR name SIMILAR TO 'b%'",
]


@pytest.mark.parametrize("sql", ACCEPTED)
def test_read_only_queries_pass(sql: str) -> None:
    assert check_read_only(sql) == sql.strip().rstrip(";").strip()


REFUSED = [
    ("SELECT 1; SELECT 2", "only one statement is allowed (found 2)"),
    ("UPDATE orders SET status = 'x'", "only SELECT or WITH queries are allowed, got UPDATE"),
    ("SELECT * FROM orders WHERE id = 1 OR 1=1; DROP TABLE orders", "only one statement"),
    ("SELECT * FROM t /* ; */ ; DELETE FROM t", "only one statement"),
    ("SELECT * FROM t -- harmless\n; INSERT INTO t VALUES (1)", "only one statement"),
    # the bypasses of the hand-written scanner
    ("SELECT E'\\\\' ' ; COMMIT; DELETE FROM ce_audit; --'", "SQL does not parse: syntax error"),
    ("SELECT E'\\'' ; COMMIT; DELETE FROM ce_audit; --'", "only one statement"),
    ("SELECT E'\\' ' ; COMMIT; DELETE FROM ce_audit; --'", "only one statement is allowed (found 3)"),
    ("SELECT $_$'$_$; COMMIT; DELETE FROM ce_audit; --'", "dollar-quoted strings are not allowed"),
    ('SELECT "pg_sleep"(5)', "function pg_sleep() is not allowed"),
    ("SELECT \"pg_read_file\"('/etc/hostname')", "function pg_read_file() is not allowed"),
    ("SELECT pg_catalog.\"pg_sleep\"(5)", "function pg_sleep() is not allowed"),
    ('SELECT "LOWER"(name) FROM t', "function LOWER() is not in the allowed function list"),
    ("SELECT evil.lower(name) FROM t", "function evil.lower() is not in the allowed function list"),
    ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/x'", "only SELECT or WITH queries are allowed, got COPY"),
    ("DO 'BEGIN PERFORM 1; END'", "only SELECT or WITH queries are allowed, got DO"),
    # effects hidden in the tree
    ("SELECT * FROM t FOR SHARE", "locking clauses"),
    ("SELECT * FROM t FOR NO KEY UPDATE", "locking clauses"),
    ("SELECT (SELECT 1 FROM t FOR UPDATE)", "locking clauses"),
    ("SELECT * INTO copied FROM t", "SELECT ... INTO is not allowed"),
    ("WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x", "keyword INSERT is not allowed"),
    ("WITH x AS (SELECT 1), y AS (UPDATE t SET a = 1 RETURNING a) SELECT * FROM y", "keyword UPDATE is not allowed"),
    ("WITH x AS (SELECT 1) DELETE FROM t", "only SELECT or WITH queries are allowed, got DELETE"),
    ("SELECT lo_import('/etc/passwd')", "function lo_import()"),
    ("SELECT pg_catalog.pg_read_file('x')", "function pg_read_file()"),
    ("SELECT pg_try_advisory_lock(42)", "function pg_try_advisory_lock() is not allowed"),
    ("SELECT set_config('statement_timeout', '0', false)", "function set_config() is not allowed"),
    ("SELECT nextval('s')", "function nextval() is not allowed"),
    ("SELECT * FROM generate_series(1, 10)", "function generate_series() is not in the allowed function list"),
    ("SELECT count(*) FILTER (WHERE pg_sleep(1) IS NULL) FROM t", "function pg_sleep()"),
    ("SELECT max(x) OVER (ORDER BY pg_sleep(1)) FROM t", "function pg_sleep()"),
    ("SELECT 'pg_shadow'::regclass", "type regclass is not allowed"),
    ("SELECT CAST('x' AS my_domain)", "type my_domain is not allowed"),
    ("SELECT 1 FROM t TABLESAMPLE system_time(1000)", "TABLESAMPLE method system_time is not allowed"),
    ("SELECT xmin, ctid FROM t", "system column xmin is not readable"),
    ("SELECT * FROM pg_catalog.pg_authid", "system catalog pg_catalog.pg_authid is not readable"),
    ("SELECT passwd FROM pg_shadow", "system catalog pg_shadow is not readable"),
    ("SELECT 1 OPERATOR(public.+) 1", "operator public.+ is not allowed"),
    ("SELECT x FROM t ORDER BY x USING OPERATOR(public.<)", "operator public.< is not allowed"),
    ("SELECT 1 WHERE 1 OPERATOR(evil.=) ANY (SELECT 1)", "operator evil.= is not allowed"),
    ("SELECT xmlparse(document '<a/>')", "XML construction is not allowed"),
    ("SELECT * FROM XMLTABLE('/a' PASSING '<a/>' COLUMNS x int)", "XMLTABLE is not allowed"),
    ("SELECT $1", "positional parameter $1 is not allowed"),
    # malformed
    ("SELECT 1 /* unterminated", "unterminated /* comment"),
    ('SELECT "open', "unterminated quoted identifier"),
    ("SELECT 'open", "unterminated quoted string"),
    ("SELECT $tag$ x $tag$", "dollar-quoted"),
    ("   ", "non-empty"),
    ("EXPLAIN ANALYZE SELECT 1", "only SELECT or WITH queries are allowed, got EXPLAIN"),
    ("SELECT " + "(" * 20_000 + "1" + ")" * 20_000, "SQL does not parse"),
    ("SELECT " + "1 + " * 40_000 + "1", "tool SQL may have at most 100000"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED)
def test_anything_else_is_refused_with_a_reason(sql: str, message: str) -> None:
    with pytest.raises(UnsafeSqlError) as info:
        check_read_only(sql)
    assert message in info.value.message
    assert info.value.code is ErrorCode.UNSAFE_SQL and not info.value.recoverable


def test_the_function_allow_list_takes_settings() -> None:
    assert check_read_only("SELECT random()", allowed_functions=["random"])
    assert check_read_only("SELECT reporting.fiscal_year(d) FROM t", allowed_functions=["reporting.fiscal_year"])
    with pytest.raises(UnsafeSqlError, match=r"function other\.fiscal_year\(\) is not in the allowed"):
        check_read_only("SELECT other.fiscal_year(d) FROM t", allowed_functions=["reporting.fiscal_year"])
    with pytest.raises(UnsafeSqlError, match=r"function lower\(\) is not allowed in tool SQL"):
        check_read_only("SELECT lower(name) FROM t", blocked_functions=["pg_catalog.lower"])
    with pytest.raises(UnsafeSqlError, match="keyword UNION is not allowed"):
        check_read_only("SELECT 1 UNION SELECT 2", blocked_keywords=["union"])
    assert check_read_only('SELECT "union" FROM t', blocked_keywords=["union"])  # a quoted name is not the keyword


def test_parameters_are_numbered_where_they_stand() -> None:
    sql = "SELECT a FROM t WHERE b = :b AND c IN :cs AND d = :b AND e = ':b' -- :x\nLIMIT :limit"
    checked = prepare(sql, {"b": "B", "cs": [1, 2], "limit": 5}, SqlPolicy.build())
    assert checked.numbered.postgres == ("SELECT a FROM t WHERE b =  $1  AND c IN  ($2, $3)  AND d =  $1  "
                                         "AND e = ':b' -- :x\nLIMIT  $4 ")
    assert checked.numbered.sqlite == checked.numbered.postgres.replace("$", "?")
    assert checked.numbered.values == ["B", 1, 2, 5]
    assert checked.statement == sql


@pytest.mark.parametrize(("values", "message"), [({}, "the query needs a value for :b"),
                                                  ({"b": []}, ":b is an empty list")])
def test_missing_or_empty_values_are_invalid_input(values: dict, message: str) -> None:
    with pytest.raises(ToolError, match=message) as info:
        prepare("SELECT 1 WHERE 2 IN :b", values, SqlPolicy.build())
    assert info.value.code is ErrorCode.INVALID_INPUT


def test_a_value_is_checked_in_place() -> None:
    with pytest.raises(UnsafeSqlError, match="SQL does not parse"):  # IN needs a list: $1 alone is no list
        prepare("SELECT 1 WHERE 2 IN :b", {"b": 2}, SqlPolicy.build())


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


def test_bound_names_ignore_literals_comments_and_casts() -> None:
    sql = ("SELECT a::text FROM t WHERE b = :b AND c = ':not_me' AND d IN :ds AND e = E':no\\'' "
           "/* :nor_me */ AND f = \":quoted\" AND g = x:y -- :nope")
    assert bound_names(sql) == ["b", "ds"]
    assert bound_names("SELECT 1 LIMIT :limit OFFSET :select") == ["limit", "select"]
