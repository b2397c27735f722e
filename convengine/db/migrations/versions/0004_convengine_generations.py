"""ConvEngine schema generations

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 00:00:00

Brings ce_* tables created by any ConvEngine release since 2.0.0 to the current columns
(see convengine.db.generations): renamed and added columns, pre-2.0.5 history converted.
"""

from alembic import op

from convengine.db.generations import KEEP_CONSTRAINTS, bring_to_current

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    config = op.get_context().config
    assert config is not None, "migrations run through alembic commands, which pass their Config"
    changes = bring_to_current(op.get_bind(), relax=not config.attributes.get(KEEP_CONSTRAINTS, False))
    config.attributes.setdefault("changes", []).extend(changes)


def downgrade() -> None:
    """Nothing to undo: columns added for older generations are kept, converted history too."""
