"""Raw control-table rows: type coercion against the ce_* columns, and id assignment.

Rows come from a pack (YAML) or from the database as plain dicts. Coercion checks each
value against its column's type and reports a :class:`Violation` per bad cell; unknown
columns and missing required columns are violations too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from convengine.catalog.booleans import require_bool
from convengine.catalog.errors import Violation
from convengine.db.models import CONTROL_TABLES, MODEL_BY_TABLE


@dataclass(slots=True)
class RowSet:
    """Coerced rows per control table, each tagged with where it came from."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    labels: dict[str, list[str]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def label(self, table: str, index: int) -> str:
        return self.labels[table][index]


def columns_of(table: str) -> dict[str, sa.Column[Any]]:
    return {c.name: c for c in MODEL_BY_TABLE[table].__table__.columns}


def is_required(column: sa.Column[Any]) -> bool:
    """Whether a row must give this column (a non-null column without default, an id not assigned)."""
    if column.primary_key:
        return kind_of(column) != "int" or column.autoincrement is False
    if column.nullable:
        return False
    return column.default is None and column.server_default is None


def coerce_rows(tables: Mapping[str, Iterable[Mapping[str, Any]] | None], *, origin: str) -> RowSet:
    """Coerce every row of ``tables``; ids left out are assigned after the largest given id.

    Args:
        tables: table name -> rows (dicts keyed by column name).
        origin: ``"pack"`` (rows labelled by position) or ``"database"`` (labelled by id).
    """
    out = RowSet()
    for table, rows in tables.items():
        if table not in CONTROL_TABLES:
            out.violations.append(Violation(table, "-", None, f"unknown table; expected one of {', '.join(CONTROL_TABLES)}"))
            continue
        if rows is None:
            rows = []
        if not isinstance(rows, list):
            out.violations.append(Violation(table, "-", None, "must be a list of rows"))
            continue
        coerced, labels = _coerce_table(table, rows, origin, out.violations)
        out.rows[table], out.labels[table] = coerced, labels
    return out


def _coerce_table(
    table: str, rows: list[Any], origin: str, violations: list[Violation]
) -> tuple[list[dict[str, Any]], list[str]]:
    cols = columns_of(table)
    pk = next(c for c in cols.values() if c.primary_key)
    coerced: list[dict[str, Any]] = []
    labels: list[str] = []
    for index, raw in enumerate(rows, start=1):
        given_id = raw.get(pk.name) if isinstance(raw, Mapping) else None
        label = str(given_id) if given_id is not None else f"#{index}"
        if origin == "pack" and given_id is None:
            label = f"#{index} (row {index}, no {pk.name})"
        if not isinstance(raw, Mapping):
            violations.append(Violation(table, label, None, f"row must be a mapping of column -> value, got {type(raw).__name__}"))
            continue
        row = _coerce_row(table, label, raw, cols, violations)
        if row is not None:
            coerced.append(row)
            labels.append(label)
    _check_duplicate_ids(table, pk.name, coerced, labels, violations)
    _assign_ids(pk, coerced)
    return coerced, labels


def _coerce_row(
    table: str, label: str, raw: Mapping[str, Any], cols: dict[str, sa.Column[Any]], violations: list[Violation]
) -> dict[str, Any] | None:
    row: dict[str, Any] = {}
    ok = True
    for key, value in raw.items():
        column = cols.get(str(key))
        if column is None:
            violations.append(Violation(table, label, str(key), f"unknown column; {table} has {', '.join(cols)}"))
            ok = False
            continue
        try:
            row[column.name] = coerce_value(column, value)
        except (TypeError, ValueError) as exc:
            violations.append(Violation(table, label, column.name, str(exc)))
            ok = False
    for name, column in cols.items():
        if is_required(column) and row.get(name) is None:
            violations.append(Violation(table, label, name, "is required"))
            ok = False
    return row if ok else None


def coerce_value(column: sa.Column[Any], value: object) -> Any:
    """Coerce one cell to the column's Python type; raises ValueError naming the problem."""
    if value is None:
        return None
    kind = kind_of(column)
    if kind == "int":
        return _to_int(value)
    if kind == "bool":
        return _to_bool(value)
    if kind == "float":
        return _to_float(value)
    if kind == "json":
        return _to_json(value)
    if kind == "datetime":
        return _to_datetime(value)
    if isinstance(value, (dict, list)):
        raise ValueError(f"expected text, got {type(value).__name__}")  # noqa: TRY004 - callers report ValueErrors
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def kind_of(column: sa.Column[Any]) -> str:
    """The column's value kind: int, bool, float, json, datetime or text."""
    type_ = column.type
    impl = getattr(type_, "impl", None)
    candidates = [type_, impl] if impl is not None else [type_]
    for candidate in candidates:
        if isinstance(candidate, sa.Boolean):
            return "bool"
        if isinstance(candidate, sa.Integer):
            return "int"
        if isinstance(candidate, sa.Numeric):
            return "float"
        if isinstance(candidate, sa.JSON):
            return "json"
        if isinstance(candidate, sa.DateTime):
            return "datetime"
    return "text"


def _to_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")  # noqa: TRY004 - callers report ValueErrors
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"expected an integer, got {value!r}")


def _to_bool(value: object) -> bool:
    return require_bool(value)


def _to_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")  # noqa: TRY004 - callers report ValueErrors
    if isinstance(value, (int, float, Decimal)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None


def _to_json(value: object) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("<"):
            return value  # XSD schemas are kept as text
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    json.dumps(value)  # raises TypeError for values JSON cannot hold
    return value


def _to_datetime(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"expected an ISO timestamp, got {value!r}") from None


def _check_duplicate_ids(
    table: str, pk: str, rows: list[dict[str, Any]], labels: list[str], violations: list[Violation]
) -> None:
    seen: set[Any] = set()
    for row, label in zip(rows, labels, strict=True):
        value = row.get(pk)
        if value is None:
            continue
        key = value.upper() if isinstance(value, str) else value
        if key in seen:
            violations.append(Violation(table, label, pk, f"duplicate {pk} {value!r}"))
        seen.add(key)


def _assign_ids(pk: sa.Column[Any], rows: list[dict[str, Any]]) -> None:
    if is_required(pk):
        return
    next_id = max((r[pk.name] for r in rows if r.get(pk.name) is not None), default=0) + 1
    for row in rows:
        if row.get(pk.name) is None:
            row[pk.name] = next_id
            next_id += 1
