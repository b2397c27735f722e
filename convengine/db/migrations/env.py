"""Alembic environment for the ce_* tables (checkpoint tables belong to the savers' setup())."""

from __future__ import annotations

from alembic import context

from convengine.db.migrate import VERSION_TABLE
from convengine.db.models import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:  # pragma: no cover - only when someone runs `alembic` by hand
    raise RuntimeError("run migrations through `convengine db upgrade --url URL`")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
