"""chains

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-14 00:00:00

``ce_chain`` / ``ce_chain_step``: chains of primitive steps (control tables: packs import, export,
validate and version them like every other ``ce_*`` table); ``ce_chain_run`` / ``ce_chain_run_step``:
each run of a chain and each step it took (convengine.chains).
"""

from alembic import op

from convengine.db.models import CHAIN_MODELS, CHAIN_RUN_MODELS, Base

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

MODELS: tuple[type[Base], ...] = (*CHAIN_MODELS, *CHAIN_RUN_MODELS)


def upgrade() -> None:
    bind = op.get_bind()
    for model in MODELS:
        model.__table__.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for model in reversed(MODELS):
        model.__table__.drop(bind, checkfirst=True)
