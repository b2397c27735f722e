"""conversation memory

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 00:00:00

``ce_conversation.user_id`` (the end user a conversation belongs to, set once) and
``ce_conversation.lifecycle`` (READY / IN_PROGRESS / ENDED / INTERRUPTED);
``ce_conversation_history.undone`` (rows of undone turns are marked, never deleted); and
``ce_conversation_step``, one row per completed turn (its input, actions, data, output and
effects outside the engine). Only what is missing is added. Long-term properties live in
LangGraph's store, whose tables its own ``setup()`` creates.
"""

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

from convengine.db.models import MEMORY_MODELS

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS: tuple[tuple[str, Callable[[], sa.Column[Any]]], ...] = (
    ("ce_conversation", lambda: sa.Column("user_id", sa.Text(), nullable=True)),
    ("ce_conversation", lambda: sa.Column("lifecycle", sa.Text(), nullable=True)),
    ("ce_conversation_history",
     lambda: sa.Column("undone", sa.Boolean(), nullable=False, server_default=sa.false())),
)


def _has(table: str, column: str) -> bool:
    return any(c["name"] == column for c in sa.inspect(op.get_bind()).get_columns(table))


def upgrade() -> None:
    for table, column in COLUMNS:
        added = column()
        if not _has(table, added.name):
            op.add_column(table, added)
    bind = op.get_bind()
    for model in MEMORY_MODELS:
        model.__table__.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for model in reversed(MEMORY_MODELS):
        model.__table__.drop(bind, checkfirst=True)
    for table, column in reversed(COLUMNS):
        name = column().name
        if _has(table, name):
            with op.batch_alter_table(table) as batch:
                batch.drop_column(name)
