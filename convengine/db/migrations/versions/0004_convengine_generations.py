"""ConvEngine schema generations

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 00:00:00

Brings ce_* tables created by any ConvEngine release since 2.0.0 to the current columns.
"""

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Filled in by the next commit."""


def downgrade() -> None:
    """Nothing to undo: columns added for older generations are kept."""
