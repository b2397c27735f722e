"""turn analytics columns

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-15 00:00:00

What analytics counts, kept in plain columns of ``ce_conversation_step`` when the turn is written
(its intent and state, whether a fallback answered it, whether it handed off, its model calls,
tokens and estimated cost), so ``Engine.stats`` aggregates with SQL instead of decoding each turn's
packed audit row; indexes on the step's and the conversation's times keep a window's query bounded.
Only what is missing is added; older turns keep NULL there and count as turns only.
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from convengine.db.models import STEP_STATS_COLUMNS, CeConversation, CeConversationStep

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

STEP = CeConversationStep.__table__
INDEXES: tuple[tuple[sa.Table, str], ...] = ((STEP, "created_at"), (CeConversation.__table__, "updated_at"))


def _has(table: str, column: str) -> bool:
    return any(c["name"] == column for c in sa.inspect(op.get_bind()).get_columns(table))


def _index(table: sa.Table, column: str) -> Any:
    return next(i for i in table.indexes if [c.name for c in i.columns] == [column])


def upgrade() -> None:
    for name in STEP_STATS_COLUMNS:
        if not _has(STEP.name, name):
            op.add_column(STEP.name, sa.Column(name, STEP.c[name].type, nullable=True))
    bind = op.get_bind()
    for table, indexed in INDEXES:
        _index(table, indexed).create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for table, indexed in INDEXES:
        _index(table, indexed).drop(bind, checkfirst=True)
    with op.batch_alter_table(STEP.name) as batch:
        for name in STEP_STATS_COLUMNS:
            if _has(STEP.name, name):
                batch.drop_column(name)
