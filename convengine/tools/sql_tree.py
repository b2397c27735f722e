"""The parse tree of one tool query, checked node by node against what a plain read may contain.

Every node of the tree is visited; a node type not listed in ``READ_NODES`` is refused, so a
construct PostgreSQL adds later is refused until someone decides it is safe. Function calls
(quoted or not, schema-qualified or not, in FROM, in TABLESAMPLE, in window or filter clauses)
must be on the allow-list; casts may only name plain built-in types (a type's input function
runs on the cast); operators may only be qualified with ``pg_catalog``; system columns and
system catalogs are not readable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pglast import ast

from convengine.tools.sql_policy import SqlPolicy
from convengine.tools.sql_tokens import UnsafeSqlError

READ_NODES = frozenset({
    "SelectStmt", "ResTarget", "ColumnRef", "A_Star", "A_Const", "String", "Integer", "Float", "Boolean",
    "BitString", "A_Expr", "BoolExpr", "FuncCall", "TypeCast", "TypeName", "RangeVar", "Alias", "JoinExpr",
    "RangeSubselect", "RangeFunction", "RangeTableSample", "SortBy", "WindowDef", "WithClause", "CommonTableExpr",
    "CTESearchClause", "CTECycleClause", "SubLink", "CaseExpr", "CaseWhen", "CoalesceExpr", "MinMaxExpr",
    "NullTest", "BooleanTest", "RowExpr", "A_ArrayExpr", "A_Indices", "A_Indirection", "ParamRef",
    "SQLValueFunction", "CollateClause", "GroupingSet", "GroupingFunc", "NamedArgExpr",
})
ALLOWED_TYPES = frozenset({
    "bool", "int2", "int4", "int8", "numeric", "float4", "float8", "text", "varchar", "bpchar", "char", "date",
    "time", "timetz", "timestamp", "timestamptz", "interval", "uuid", "json", "jsonb", "bytea",
})
SYSTEM_COLUMNS = frozenset({"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"})
SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema", "pg_toast"})
SAMPLING_METHODS = frozenset({"system", "bernoulli"})
DATA_CHANGES = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE"}


def walk(root: ast.Node) -> Iterator[ast.Node]:
    """Every node below ``root`` (itself included), parents before children."""
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif isinstance(item, ast.Node):
            yield item
            stack.extend(reversed([getattr(item, member) for member in item]))


def check_select(stmt: ast.Node, policy: SqlPolicy) -> None:
    """Refuse anything in a SELECT's tree that is more than a read."""
    for node in walk(stmt):
        kind = type(node).__name__
        check = CHECKS.get(kind)
        if check is not None:
            check(node, policy)
        elif kind not in READ_NODES:
            raise UnsafeSqlError(f"{_describe(kind)} is not allowed in tool SQL")


def _names(strings: Iterable[object] | None) -> list[str]:
    return [s.sval or "" for s in strings or () if isinstance(s, ast.String)]


def _function(node: ast.FuncCall, policy: SqlPolicy) -> None:
    name = _names(node.funcname)
    if not policy.allows_function(name):
        raise UnsafeSqlError(policy.refusal(".".join(name)))


def _type(node: ast.TypeName, policy: SqlPolicy) -> None:
    name = _names(node.names)
    base = name[1] if len(name) == 2 and name[0] == "pg_catalog" else (name[0] if len(name) == 1 else None)
    if node.pct_type or node.setof or base not in ALLOWED_TYPES:
        raise UnsafeSqlError(f"type {'.'.join(name)} is not allowed in tool SQL "
                             f"(casts may use: {', '.join(sorted(ALLOWED_TYPES))})")


def _operator(node: ast.Node, policy: SqlPolicy) -> None:
    """``OPERATOR(schema.op)`` in an expression, ``ORDER BY ... USING`` or ``x op ANY (SELECT ...)``."""
    name = _names(getattr(node, "name", None) or getattr(node, "useOp", None) or getattr(node, "operName", None))
    if len(name) > 1 and name[:-1] != ["pg_catalog"]:
        raise UnsafeSqlError(f"operator {'.'.join(name)} is not allowed in tool SQL (only pg_catalog operators)")


def _column(node: ast.ColumnRef, policy: SqlPolicy) -> None:
    name = _names(node.fields)
    if name and name[-1] in SYSTEM_COLUMNS:
        raise UnsafeSqlError(f"system column {name[-1]} is not readable by tool SQL")


def _relation(node: ast.RangeVar, policy: SqlPolicy) -> None:
    name = node.relname or ""
    if (node.schemaname or "").lower() in SYSTEM_SCHEMAS or name.lower().startswith(("pg_", "sqlite_")):
        full = f"{node.schemaname}.{name}" if node.schemaname else name
        raise UnsafeSqlError(f"system catalog {full} is not readable by tool SQL")


def _sample(node: ast.RangeTableSample, policy: SqlPolicy) -> None:
    name = _names(node.method)
    if name[-1:] and name[-1] in SAMPLING_METHODS and name[:-1] in ([], ["pg_catalog"]):
        return
    raise UnsafeSqlError(f"TABLESAMPLE method {'.'.join(name)} is not allowed (use SYSTEM or BERNOULLI)")


def _cte(node: ast.CommonTableExpr, policy: SqlPolicy) -> None:
    kind = type(node.ctequery).__name__
    if kind in DATA_CHANGES:
        raise UnsafeSqlError(f"keyword {DATA_CHANGES[kind]} is not allowed in a read-only query "
                             f"(the WITH query {node.ctename} changes data)")


def _into(node: ast.Node, policy: SqlPolicy) -> None:
    raise UnsafeSqlError("SELECT ... INTO is not allowed (it creates a table)")


def _locking(node: ast.Node, policy: SqlPolicy) -> None:
    raise UnsafeSqlError("locking clauses (FOR UPDATE / FOR SHARE) are not allowed")


def _describe(kind: str) -> str:
    return {"XmlExpr": "XML construction", "XmlSerialize": "XMLSERIALIZE", "RangeTableFunc": "XMLTABLE",
            "JsonTable": "JSON_TABLE"}.get(kind, f"a {kind} node")


CHECKS: dict[str, Callable[[Any, SqlPolicy], None]] = {
    "FuncCall": _function, "TypeName": _type, "A_Expr": _operator, "SortBy": _operator, "SubLink": _operator,
    "ColumnRef": _column, "RangeVar": _relation,
    "RangeTableSample": _sample, "CommonTableExpr": _cte, "IntoClause": _into, "LockingClause": _locking,
}
