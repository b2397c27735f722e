"""Row edits applied to a version's content (the pack), giving the content of the next draft."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from convengine.catalog.errors import InvalidInputError
from convengine.db.models import CONTROL_TABLES
from convengine.versions.content import primary_key


def apply_edits(base: Mapping[str, Any], upsert: Mapping[str, Sequence[Mapping[str, Any]]],
                delete: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """``base`` with rows upserted (matched by primary key; a row without one is added) and deleted.

    Raises:
        InvalidInputError: an unknown table, a row that is not an object, or a key that is not there.
    """
    content = copy.deepcopy(dict(base))
    for table, rows in upsert.items():
        _check_table(table)
        if not isinstance(rows, Sequence) or isinstance(rows, str | bytes):
            raise InvalidInputError(f"upsert.{table} must be a list of rows")
        for row in rows:
            _upsert(content, table, row)
    for table, keys in delete.items():
        _check_table(table)
        if not isinstance(keys, Sequence) or isinstance(keys, str | bytes):
            raise InvalidInputError(f"delete.{table} must be a list of primary keys")
        for key in keys:
            _delete(content, table, key)
    return content


def _check_table(table: object) -> None:
    if table not in CONTROL_TABLES:
        raise InvalidInputError(f"unknown table {str(table)[:60]!r}; expected one of {', '.join(CONTROL_TABLES)}")


def _upsert(content: dict[str, Any], table: str, row: object) -> None:
    if not isinstance(row, Mapping):
        raise InvalidInputError(f"upsert.{table}: a row must be an object, got {type(row).__name__}")
    rows: list[dict[str, Any]] = content.setdefault(table, [])
    pk = primary_key(table)
    for stored in rows:
        if pk in row and stored.get(pk) == row[pk]:
            stored.update(row)
            return
    rows.append(dict(row))


def _delete(content: dict[str, Any], table: str, key: object) -> None:
    pk = primary_key(table)
    rows = content.get(table) or []
    kept = [r for r in rows if r.get(pk) != key]
    if len(kept) == len(rows):
        raise InvalidInputError(f"delete.{table}: no row with {pk} = {str(key)[:60]!r} in the draft")
    content[table] = kept
