"""configuration stamp

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 00:00:00

``convengine_config_stamp``: one row changed by every pack import and cache refresh; each
process compares it with the stamp it loaded, so a change made through any process reaches all.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLE = "convengine_config_stamp"


def upgrade() -> None:
    if TABLE in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        TABLE,
        sa.Column("stamp_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("stamp", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
