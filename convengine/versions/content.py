"""A version's content: the pack of every control row, in one canonical form, and its hash.

The canonical form is what the control tables hold when the version is live: a pack read back
from the database (ids assigned, column defaults filled, timestamps left out), serialised as JSON
with sorted keys. Two versions with the same rows therefore have the same hash, whether they came
from a pack file, an edit or the tables themselves.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from convengine.catalog.defaults import LIVE_CHANNEL
from convengine.config_loader.identity import TIMESTAMPS, canonical, content_of_rows, digest, short_id
from convengine.config_loader.loader import _DELETE_ORDER, _INSERT_ORDER, _insert_rows, _read_rows
from convengine.config_loader.packs import pack_tables, read_pack
from convengine.config_loader.rows import coerce_rows
from convengine.db.models import MODEL_BY_TABLE, Base, primary_key_column

__all__ = ["DRAFT_CHANNEL", "LIVE_CHANNEL", "MIGRATIONS", "canonical", "content_of_rows", "digest"]

DRAFT_CHANNEL = "draft"
"""The reserved channel naming the draft: the latest version made by an edit, not yet published."""
MIGRATIONS = ("pin", "latest")
"""A channel's migration policy: ``pin`` keeps a conversation on the version it started on until it
ends or resets; ``latest`` moves it to the channel's version at its next turn."""


def live_content(conn: sa.Connection) -> dict[str, Any]:
    """The content the control tables hold now (in the caller's transaction)."""
    return content_of_rows(_read_rows(conn, skip=TIMESTAMPS))


def normalise(conn: sa.Connection, source: str | Any) -> dict[str, Any]:
    """A pack (path, YAML text or mapping) in canonical form, by writing its rows into the control
    tables and reading them back inside the caller's transaction, which the caller rolls back.

    Raises:
        PackError: the pack cannot be read, or its rows break the tables' constraints.
        ConfigValidationError: a value cannot be coerced to its column's type.
    """
    rowset = coerce_rows(pack_tables(read_pack(source)), origin="pack")
    for table in _DELETE_ORDER:
        conn.execute(sa.delete(MODEL_BY_TABLE[table].__table__))
    for table in _INSERT_ORDER:
        _insert_rows(conn, table, rowset.rows.get(table, []))
    return live_content(conn)


def primary_key(table: str) -> str:
    return primary_key_column(table)


def pack_id(source: str | Any) -> str:
    """The configuration id a pack gets once imported: its rows written into empty control tables (an
    in-memory SQLite database) and read back, ids assigned and defaults filled, as an import does.

    Raises:
        PackError: the pack cannot be read, or its rows break the tables' constraints.
    """
    engine = sa.create_engine("sqlite://")
    try:
        Base.metadata.create_all(engine, tables=[MODEL_BY_TABLE[t].__table__ for t in _INSERT_ORDER])
        with engine.connect() as conn:
            return short_id(digest(canonical(normalise(conn, source))))
    finally:
        engine.dispose()
