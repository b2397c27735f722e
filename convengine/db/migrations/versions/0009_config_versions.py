"""versioned configuration

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-09 00:00:00

``ce_config_version`` (immutable versions of the configuration), ``ce_config_channel`` (which
version each named channel serves), ``ce_config_publication`` (every move of a channel) and
``ce_conversation_version`` (the version each conversation is pinned to). ConvEngine's control
tables are unchanged: they mirror the version published on the live channel.
"""

from alembic import op

from convengine.db.models import VERSION_MODELS

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    for model in VERSION_MODELS:
        model.__table__.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for model in reversed(VERSION_MODELS):
        model.__table__.drop(bind, checkfirst=True)
