"""What changed between two versions, table by table and row by row (rows matched by primary key)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from convengine.config_loader.build import flatten_settings
from convengine.config_loader.packs import SETTINGS_KEY
from convengine.db.models import CONTROL_TABLES
from convengine.versions.content import primary_key


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row of a table: added, removed or changed (``columns``: column -> (before, after))."""

    kind: str
    key: Any
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    columns: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "key": self.key}
        if self.kind == "changed":
            out["columns"] = {c: {"before": b, "after": a} for c, (b, a) in self.columns.items()}
        else:
            out["row"] = dict((self.after if self.kind == "added" else self.before) or {})
        return out


@dataclass(frozen=True, slots=True)
class TableDiff:
    table: str
    changes: tuple[RowChange, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "changes": [c.to_dict() for c in self.changes]}


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[TableDiff]:
    """The tables that differ between two version contents, each with its changed rows in key order;
    ``settings`` (the pack's settings block) is compared setting by setting."""
    out: list[TableDiff] = []
    for table in (SETTINGS_KEY, *CONTROL_TABLES):
        if table == SETTINGS_KEY:
            old, new = _settings(before), _settings(after)
        else:
            old, new = _keyed(table, before.get(table) or []), _keyed(table, after.get(table) or [])
        changes = [_change(key, old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys(), key=_order)]
        kept = tuple(c for c in changes if c is not None)
        if kept:
            out.append(TableDiff(table, kept))
    return out


def _order(key: object) -> tuple[int, int | str]:
    return (0, key) if isinstance(key, int) else (1, str(key))


def _keyed(table: str, rows: list[Mapping[str, Any]]) -> dict[Any, Mapping[str, Any]]:
    pk = primary_key(table)
    return {row.get(pk, f"#{index}"): row for index, row in enumerate(rows)}


def _settings(pack: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    return {path: {"value": value} for path, value in flatten_settings(pack.get(SETTINGS_KEY) or {}).items()}


def _change(key: object, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> RowChange | None:
    if old is None:
        return RowChange("added", key, after=new)
    if new is None:
        return RowChange("removed", key, before=old)
    columns = {c: (old.get(c), new.get(c)) for c in sorted(old.keys() | new.keys()) if old.get(c) != new.get(c)}
    return RowChange("changed", key, old, new, columns) if columns else None


def render(diffs: list[TableDiff], a: int, b: int) -> str:
    """The diff as text: one block per table, one line per row (and per changed column)."""
    if not diffs:
        return f"versions {a} and {b} have the same rows\n"
    lines = [f"changes from version {a} to version {b}:"]
    for table in diffs:
        lines.append(f"{table.table}:")
        for change in table.changes:
            if change.kind == "changed":
                lines.append(f"  ~ {change.key}")
                lines += [f"      {col}: {_short(b_)} -> {_short(a_)}" for col, (b_, a_) in change.columns.items()]
            else:
                sign = "+" if change.kind == "added" else "-"
                lines.append(f"  {sign} {change.key}: {_short(change.after or change.before)}")
    return "\n".join(lines) + "\n"


def _short(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
