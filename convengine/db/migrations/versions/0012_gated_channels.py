"""gated channels

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 00:00:00

``ce_config_channel.gated``: a channel that, like ``production``, serves only versions that passed the
publish gate (``docs/versions.md``). Every existing channel starts ungated (``production`` is gated
whatever the column says).
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("ce_config_channel")}
    if "gated" not in columns:
        op.add_column("ce_config_channel", sa.Column("gated", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("ce_config_channel") as batch:
        batch.drop_column("gated")
