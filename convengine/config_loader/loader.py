"""Reading control tables into snapshots, importing and exporting packs, atomic reloads."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from convengine.catalog.errors import ConfigError, ConfigValidationError, PackError
from convengine.config.snapshot import ConfigSnapshot
from convengine.config_loader import stamp
from convengine.config_loader.build import Extensions, SnapshotInput, build_snapshot
from convengine.config_loader.identity import TIMESTAMPS, configuration_id
from convengine.config_loader.packs import pack_tables, read_pack, rows_to_pack, unsupported_in_pack
from convengine.config_loader.rows import coerce_rows
from convengine.db.generations import require_current, unsupported_tables, unsupported_warning
from convengine.db.models import CONTROL_MODELS, CONTROL_TABLES, MODEL_BY_TABLE, primary_key_column

logger = logging.getLogger(__name__)

# Delete children before parents, insert parents before children.
_DELETE_ORDER = ("ce_mcp_db_tool",) + tuple(t for t in reversed(CONTROL_TABLES) if t != "ce_mcp_db_tool")
_INSERT_ORDER = tuple(t for t in CONTROL_TABLES if t != "ce_mcp_db_tool") + ("ce_mcp_db_tool",)


def read_control_rows(engine: sa.Engine) -> dict[str, list[dict[str, Any]]]:
    """Every control-table row as a plain dict, in primary-key order, in one transaction.

    Raises:
        ConfigError: ``SCHEMA_OUTDATED`` when the tables lack columns (an older ConvEngine
            schema not yet upgraded), naming each one.
    """
    try:
        with engine.connect() as conn:
            return _read_rows(conn)
    except sa.exc.DBAPIError:
        require_current(engine)  # names the missing columns when that is the cause
        raise


def _read_rows(conn: sa.Connection, *, skip: frozenset[str] = frozenset()) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for model in CONTROL_MODELS:
        table = model.__table__
        pk = primary_key_column(model.__tablename__)
        result = conn.execute(sa.select(table).order_by(table.c[pk]))
        out[model.__tablename__] = [{k: v for k, v in row._mapping.items() if k not in skip} for row in result]
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
    with engine.connect() as conn:
        unsupported = unsupported_warning(unsupported_tables(conn), where="the database")
    snapshot = build_snapshot(
        SnapshotInput(rows, origin="database", settings_overrides=dict(settings_overrides or {}),
                      extensions=extensions or Extensions(), source="database configuration",
                      notes=(unsupported,) if unsupported else ())
    )
    return dataclasses.replace(snapshot, version=configuration_id(rows))  # the id `pack versions` lists it by


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
    unsupported = unsupported_in_pack(pack)
    return build_snapshot(
        SnapshotInput(pack_tables(pack), origin="pack", settings_overrides=dict(settings_overrides or {}),
                      extensions=extensions or Extensions(), source=name, notes=(unsupported,) if unsupported else ())
    )


ImportHook = Callable[[sa.Connection, Mapping[str, list[dict[str, Any]]]], None]
"""Called in an import's transaction with the rows as stored, when the import changed them."""


def import_pack(
    engine: sa.Engine,
    source: str | Path | Mapping[str, Any],
    *,
    extensions: Extensions | None = None,
    replace: bool = True,
    on_change: ImportHook | None = None,
    settings_overrides: Mapping[str, Any] | None = None,
) -> ConfigSnapshot:
    """Make the control tables hold the pack's rows, in one transaction.

    The pack is validated first; nothing is written unless all of it is valid, and a
    failure while writing rolls the whole import back. Imports are serialised (a PostgreSQL
    advisory lock; SQLite's write lock), and a database that already holds exactly the pack's
    rows is left untouched, so replicas starting together with the same pack all come up.
    With ``replace=False`` a database holding a *different* configuration is refused
    (:class:`ConfigurationExistsError` says what would be replaced) instead of overwritten.
    ``on_change(conn, rows)`` runs in the import's transaction when the rows changed (the engine and
    the CLI record the import as a configuration version: :func:`convengine.versions.lifecycle.record_import`).
    ``settings_overrides`` are the operator's keyword settings the pack is validated under.
    """
    snapshot = validate_pack(source, settings_overrides=settings_overrides, extensions=extensions)
    rowset = coerce_rows(pack_tables(read_pack(source)), origin="pack")
    try:
        with engine.connect() as conn:
            if _import_rows(conn, rowset.rows, replace=replace, on_change=on_change):
                conn.commit()
            else:  # the same configuration: keep the rows (and their timestamps) as they are
                conn.rollback()
                logger.info("configuration unchanged: the database already holds this pack's rows")
    except sa.exc.SQLAlchemyError as exc:
        require_current(engine)  # an older schema is named as such, with the command that fixes it
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise PackError(f"importing the pack failed and nothing was written: {reason}") from exc
    return snapshot


IMPORT_LOCK_KEY = 0x636F6E76_656E6700 >> 1
"""The advisory lock that serialises pack imports on PostgreSQL (a constant 63-bit key)."""


class ConfigurationExistsError(ConfigError):
    """The database holds another configuration, and replacing it was not asked for."""


def _import_rows(conn: sa.Connection, rows: Mapping[str, list[dict[str, Any]]], *, replace: bool,
                 on_change: ImportHook | None = None) -> bool:
    """Replace the rows under the import lock; False when that changed nothing (the caller rolls back)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({IMPORT_LOCK_KEY})"))
    else:  # take SQLite's write lock before reading, so the comparison cannot go stale
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    before = _read_rows(conn, skip=TIMESTAMPS)
    _replace_rows(conn, rows)
    after = _read_rows(conn, skip=TIMESTAMPS)
    if before != after and not replace and any(before.values()):
        raise ConfigurationExistsError(_replacement(before, after))
    if before != after:
        stamp.publish(conn, stamp.new_stamp())  # every process reloads before its next turn
        if on_change is not None:
            on_change(conn, after)
    return before != after


def _replace_rows(conn: sa.Connection, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    for table in _DELETE_ORDER:
        conn.execute(sa.delete(MODEL_BY_TABLE[table].__table__))
    for table in _INSERT_ORDER:
        _insert_rows(conn, table, rows.get(table, []))
    if conn.dialect.name == "postgresql":
        _reset_sequences(conn)


def _replacement(before: Mapping[str, list[Any]], after: Mapping[str, list[Any]]) -> str:
    changed = [f"{t} ({len(before[t])} rows stored, {len(after[t])} in the pack)"
               for t in CONTROL_TABLES if before[t] != after[t]]
    return ("the database already holds a different configuration; importing this pack would replace "
            f"{', '.join(changed)}. Use it as it is (leave out the pack), or replace it on purpose "
            "(--replace; replace=True from Python)")


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
    stamp: str | None = None
    """The configuration stamp that was stored when the current snapshot was loaded."""

    @property
    def current(self) -> ConfigSnapshot:
        if self._current is None:
            raise ConfigError("no configuration loaded yet")
        return self._current

    def reload(self, *, raise_on_error: bool = True) -> ConfigSnapshot:
        """Load a fresh snapshot; on failure keep the old one and report why."""
        with self._lock:
            self.stamp = stamp.read(self.engine)  # read first: a change made meanwhile is seen next time
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

    def refresh(self) -> ConfigSnapshot:
        """Reload, then tell every other process to reload too (a new stamp)."""
        snapshot = self.reload()
        with self._lock, self.engine.begin() as conn:
            self.stamp = stamp.new_stamp()
            stamp.publish(conn, self.stamp)
        return snapshot

    def is_stale(self, stored: str | None) -> bool:
        return stored != self.stamp
