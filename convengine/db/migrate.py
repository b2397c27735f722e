"""Apply the Alembic migrations of the ``ce_*`` tables (idempotent)."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

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


def upgrade(url: DatabaseUrl | sa.Engine, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``; running it twice changes nothing."""
    from convengine.db.engines import create_sync_engine

    engine = url if isinstance(url, sa.Engine) else create_sync_engine(url)
    try:
        with _IN_PROCESS, engine.begin() as connection:
            # Two processes migrating one database at once must not race: the second waits, then
            # finds the tables at head.
            if connection.dialect.name == "postgresql":
                connection.execute(sa.text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
            else:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            command.upgrade(alembic_config(connection), revision)
    finally:
        if not isinstance(url, sa.Engine):
            engine.dispose()
