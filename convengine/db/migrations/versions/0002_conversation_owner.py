"""conversation owner

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 00:00:00

``ce_conversation.owner_id``: the identity of the HTTP caller that created the conversation
(a digest, never a key); NULL for conversations created by host code.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _has_owner() -> bool:
    columns = sa.inspect(op.get_bind()).get_columns("ce_conversation")
    return any(c["name"] == "owner_id" for c in columns)


def upgrade() -> None:
    """Add the column only when missing (databases created by ConvEngine keep working)."""
    if not _has_owner():
        op.add_column("ce_conversation", sa.Column("owner_id", sa.Text(), nullable=True))


def downgrade() -> None:
    if _has_owner():
        with op.batch_alter_table("ce_conversation") as batch:
            batch.drop_column("owner_id")
