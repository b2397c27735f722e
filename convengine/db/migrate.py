"""Apply the Alembic migrations of the ``ce_*`` tables (idempotent)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from convengine.db.engines import create_sync_engine
from convengine.db.generations import (
    KEEP_CONSTRAINTS,
    holds_foreign_configuration,
    relax_constraints,
    render_like_convengine,
)
from convengine.db.url import DatabaseUrl

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "convengine_alembic_version"
"""Alembic's revision table for the ce_* tables (migrations/env.py uses it)."""
Constraints = Literal["keep", "relax"]
MIGRATION_LOCK_KEY = 7405918203
_IN_PROCESS = threading.Lock()
"""Alembic's command API keeps module-level state: one migration at a time per process."""


def alembic_config(connection: sa.Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: DatabaseUrl | sa.Engine, revision: str = "head", *,
            convengine_constraints: Constraints | None = None) -> list[str]:
    """Bring the database at ``url`` to ``revision``; running it twice changes nothing.

    Returns what was changed in tables an older ConvEngine created (renamed, added and
    relaxed columns, converted history), in words; empty when there was nothing to change.

    A ConvEngine database is adopted on its first upgrade: its NOT NULLs that convengine's rows may
    leave empty are dropped (each with why, see ``RELAXED_COLUMNS``) unless
    ``convengine_constraints="keep"`` (a Java ConvEngine still shares the database), and its
    configuration is set to render a null variable empty, as ConvEngine did (``template_strict:
    false``). ``"relax"`` drops the NOT NULLs still declared on a database adopted earlier with "keep".
    """
    engine = url if isinstance(url, sa.Engine) else create_sync_engine(url)
    try:
        with _IN_PROCESS, engine.connect() as connection:
            cfg = alembic_config(connection)
            cfg.attributes[KEEP_CONSTRAINTS] = convengine_constraints == "keep"
            if connection.dialect.name == "postgresql":
                _upgrade_postgres(connection, cfg, revision, convengine_constraints)
            else:
                _upgrade_sqlite(connection, cfg, revision, convengine_constraints)
            return list(cfg.attributes.get("changes", []))
    finally:
        if not isinstance(url, sa.Engine):
            engine.dispose()


def _migrate(connection: sa.Connection, cfg: Config, revision: str, constraints: Constraints | None) -> None:
    """The migrations and, for a ConvEngine database, its adoption (in the caller's transaction)."""
    adopting = holds_foreign_configuration(connection, VERSION_TABLE)
    command.upgrade(cfg, revision)
    changes: list[str] = cfg.attributes.setdefault("changes", [])
    if constraints == "relax":
        changes += relax_constraints(connection)
    if adopting and revision == "head":
        changes += render_like_convengine(connection)


def _upgrade_postgres(connection: sa.Connection, cfg: Config, revision: str, constraints: Constraints | None) -> None:
    with connection.begin():
        # Two processes migrating one database at once must not race: the second waits, then
        # finds the tables at head.
        connection.execute(sa.text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        _migrate(connection, cfg, revision, constraints)


def _upgrade_sqlite(connection: sa.Connection, cfg: Config, revision: str, constraints: Constraints | None) -> None:
    # Upgrading an older ConvEngine table may rebuild it (SQLite cannot alter a column); with
    # foreign keys on, replacing ce_conversation would cascade-delete its history. The pragma
    # only takes effect outside a transaction, so it is set before BEGIN and restored after.
    _pragma(connection, "foreign_keys=OFF")
    try:
        with connection.begin():
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            _migrate(connection, cfg, revision, constraints)
    finally:
        _pragma(connection, "foreign_keys=ON")


def _pragma(connection: sa.Connection, setting: str) -> None:
    connection.exec_driver_sql(f"PRAGMA {setting}")
    connection.commit()
