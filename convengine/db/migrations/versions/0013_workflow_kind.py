"""workflows: ce_flow.kind

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-13 00:00:00

``ce_flow.kind`` tells a conversation flow (``flow``, every existing row) from a workflow graph
(``workflow``), which shares the flows' node and edge tables and is run by the workflow runtime.
Migration 0008 creates ``ce_flow`` from the current model, so a database made since has the column.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _has_kind() -> bool:
    return "kind" in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("ce_flow")}


def upgrade() -> None:
    if not _has_kind():
        with op.batch_alter_table("ce_flow") as batch:
            batch.add_column(sa.Column("kind", sa.Text(), nullable=False, server_default="flow"))


def downgrade() -> None:
    if _has_kind():
        with op.batch_alter_table("ce_flow") as batch:
            batch.drop_column("kind")
