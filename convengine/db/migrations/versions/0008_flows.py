"""conversation flows and LLM usage

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08 00:00:00

``ce_flow`` / ``ce_flow_node`` / ``ce_flow_edge``: conversation flows as graphs of typed nodes
(control tables: packs import, export and validate them like every other ``ce_*`` table), and
``ce_llm_usage``: tokens and price of each LLM call, summed for the monthly spend cap.
"""

from alembic import op

from convengine.db.models import FLOW_MODELS, Base, CeLlmUsage

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MODELS: tuple[type[Base], ...] = (*FLOW_MODELS, CeLlmUsage)


def upgrade() -> None:
    bind = op.get_bind()
    for model in MODELS:
        model.__table__.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for model in reversed(MODELS):
        model.__table__.drop(bind, checkfirst=True)
