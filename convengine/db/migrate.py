"""Apply the Alembic migrations of the ``ce_*`` tables (idempotent)."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from convengine.db.engines import create_sync_engine
from convengine.db.url import DatabaseUrl

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
MIGRATION_LOCK_KEY = 7405918203
_IN_PROCESS = threading.Lock()
"""Alembic's command API keeps module-level state: one migration at a time per process."""


def alembic_config(connection: sa.Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: DatabaseUrl | sa.Engine, revision: str = "head") -> list[str]:
    """Bring the database at ``url`` to ``revision``; running it twice changes nothing.

    Returns what was changed in tables an older ConvEngine created (renamed, added and
    relaxed columns, converted history), in words; empty when there was nothing to change."""
    engine = url if isinstance(url, sa.Engine) else create_sync_engine(url)
    try:
        with _IN_PROCESS, engine.connect() as connection:
            cfg = alembic_config(connection)
            if connection.dialect.name == "postgresql":
                _upgrade_postgres(connection, cfg, revision)
            else:
                _upgrade_sqlite(connection, cfg, revision)
            return list(cfg.attributes.get("changes", []))
    finally:
        if not isinstance(url, sa.Engine):
            engine.dispose()


def _upgrade_postgres(connection: sa.Connection, cfg: Config, revision: str) -> None:
    with connection.begin():
        # Two processes migrating one database at once must not race: the second waits, then
        # finds the tables at head.
        connection.execute(sa.text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        command.upgrade(cfg, revision)


def _upgrade_sqlite(connection: sa.Connection, cfg: Config, revision: str) -> None:
    # Upgrading an older ConvEngine table may rebuild it (SQLite cannot alter a column); with
    # foreign keys on, replacing ce_conversation would cascade-delete its history. The pragma
    # only takes effect outside a transaction, so it is set before BEGIN and restored after.
    _pragma(connection, "foreign_keys=OFF")
    try:
        with connection.begin():
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            command.upgrade(cfg, revision)
    finally:
        _pragma(connection, "foreign_keys=ON")


def _pragma(connection: sa.Connection, setting: str) -> None:
    connection.exec_driver_sql(f"PRAGMA {setting}")
    connection.commit()
