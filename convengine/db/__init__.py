"""The ``ce_*`` tables: models, URL parsing, engine factories and Alembic migrations."""

from convengine.db.engines import create_async_sa_engine, create_sync_engine
from convengine.db.migrate import upgrade
from convengine.db.url import DatabaseUrl, parse_database_url

__all__ = ["DatabaseUrl", "create_async_sa_engine", "create_sync_engine", "parse_database_url", "upgrade"]
