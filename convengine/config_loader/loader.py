"""Reading control tables into snapshots, importing and exporting packs, atomic reloads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from convengine.config_loader.build import Extensions, SnapshotInput, build_snapshot
from convengine.config_loader.packs import pack_tables, read_pack, rows_to_pack
from convengine.config_loader.rows import coerce_rows
from convengine.config_loader.snapshot import ConfigSnapshot
from convengine.db.models import CONTROL_MODELS, CONTROL_TABLES, MODEL_BY_TABLE, primary_key_column
from convengine.errors import ConfigError, ConfigValidationError, PackError

logger = logging.getLogger(__name__)

# Delete children before parents, insert parents before children.
_DELETE_ORDER = ("ce_mcp_db_tool",) + tuple(t for t in reversed(CONTROL_TABLES) if t != "ce_mcp_db_tool")
_INSERT_ORDER = tuple(t for t in CONTROL_TABLES if t != "ce_mcp_db_tool") + ("ce_mcp_db_tool",)


def read_control_rows(engine: sa.Engine) -> dict[str, list[dict[str, Any]]]:
    """Every control-table row as a plain dict, in primary-key order, in one transaction."""
    out: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for model in CONTROL_MODELS:
            table = model.__table__
            pk = primary_key_column(model.__tablename__)
            result = conn.execute(sa.select(table).order_by(table.c[pk]))
            out[model.__tablename__] = [dict(row._mapping) for row in result]
    return out


def load_snapshot(
    engine: sa.Engine,
    *,
    settings_overrides: Mapping[str, Any] | None = None,
    extensions: Extensions | None = None,
) -> ConfigSnapshot:
    """Read and validate every control table.

    Raises:
        ConfigValidationError: the rows in the database are invalid (all violations listed).
    """
    rows = read_control_rows(engine)
    return build_snapshot(
        SnapshotInput(rows, origin="database", settings_overrides=dict(settings_overrides or {}),
                      extensions=extensions or Extensions(), source="database configuration")
    )


def validate_pack(
    source: str | Path | Mapping[str, Any],
    *,
    settings_overrides: Mapping[str, Any] | None = None,
    extensions: Extensions | None = None,
) -> ConfigSnapshot:
    """Read and validate a pack without touching a database; returns its snapshot.

    Raises:
        PackError: the file cannot be read as a pack.
        ConfigValidationError: the pack's rows are invalid (all violations listed).
    """
    pack = read_pack(source)
    name = f"pack {source}" if not isinstance(source, Mapping) else "pack"
    return build_snapshot(
        SnapshotInput(pack_tables(pack), origin="pack", settings_overrides=dict(settings_overrides or {}),
                      extensions=extensions or Extensions(), source=name)
    )


def import_pack(
    engine: sa.Engine,
    source: str | Path | Mapping[str, Any],
    *,
    extensions: Extensions | None = None,
) -> ConfigSnapshot:
    """Replace every control table with the pack's rows, in one transaction.

    The pack is validated first; nothing is written unless all of it is valid, and a
    failure while writing rolls the whole import back. Importing the same pack twice
    leaves the same rows (ids are kept or assigned deterministically).
    """
    snapshot = validate_pack(source, extensions=extensions)
    rowset = coerce_rows(pack_tables(read_pack(source)), origin="pack")
    try:
        with engine.begin() as conn:
            for table in _DELETE_ORDER:
                conn.execute(sa.delete(MODEL_BY_TABLE[table].__table__))
            for table in _INSERT_ORDER:
                _insert_rows(conn, table, rowset.rows.get(table, []))
            if conn.dialect.name == "postgresql":
                _reset_sequences(conn)
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise PackError(f"importing the pack failed and nothing was written: {reason}") from exc
    return snapshot


def _insert_rows(conn: sa.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert rows in batches of rows that name the same columns (executemany needs that)."""
    batches: dict[frozenset[str], list[dict[str, Any]]] = {}
    for row in rows:
        batches.setdefault(frozenset(row), []).append(row)
    for batch in batches.values():
        conn.execute(sa.insert(MODEL_BY_TABLE[table].__table__), batch)


def _reset_sequences(conn: sa.Connection) -> None:
    """Move each serial id sequence past the ids a pack supplied explicitly."""
    for model in CONTROL_MODELS:
        table = model.__table__
        pk = table.c[primary_key_column(model.__tablename__)]
        if not isinstance(pk.type, sa.BigInteger) or not pk.autoincrement:
            continue
        conn.execute(sa.text(
            f"SELECT setval(pg_get_serial_sequence('{table.name}', '{pk.name}'), "
            f"COALESCE((SELECT MAX({pk.name}) FROM {table.name}), 0) + 1, false)"
        ))


def export_pack(engine: sa.Engine) -> dict[str, Any]:
    """The database's control tables as a pack mapping."""
    return rows_to_pack(read_control_rows(engine))


@dataclass
class SnapshotHolder:
    """Holds the current snapshot and swaps it atomically on reload.

    A reload that fails validation keeps the previous snapshot; the failure is returned
    (and raised by :meth:`reload` when ``raise_on_error``).
    """

    engine: sa.Engine
    settings_overrides: Mapping[str, Any] = field(default_factory=dict)
    extensions: Extensions = field(default_factory=Extensions)
    _current: ConfigSnapshot | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    last_error: ConfigError | None = None

    @property
    def current(self) -> ConfigSnapshot:
        if self._current is None:
            raise ConfigError("no configuration loaded yet")
        return self._current

    def reload(self, *, raise_on_error: bool = True) -> ConfigSnapshot:
        """Load a fresh snapshot; on failure keep the old one and report why."""
        with self._lock:
            try:
                snapshot = load_snapshot(self.engine, settings_overrides=self.settings_overrides,
                                         extensions=self.extensions)
            except (ConfigValidationError, PackError) as exc:
                self.last_error = exc
                logger.warning("configuration reload rejected, keeping version %s: %s",
                               self._current.version if self._current else None, exc)
                if raise_on_error or self._current is None:
                    raise
                return self._current
            self._current = snapshot
            self.last_error = None
            return snapshot
