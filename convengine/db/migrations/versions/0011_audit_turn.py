"""one audit row per turn

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-11 00:00:00

``ce_audit_turn`` holds each turn's audit events in one compact row (``convengine.audit.packing``);
``ce_audit`` keeps the rows written before, which read as they always did. An event's ``auditId`` is
its row's id times 1,000 plus its place in the row, so the new table's ids start past the highest
``ce_audit.audit_id``: ids stay unique and grow, old rows first.
"""

import sqlalchemy as sa
from alembic import op

from convengine.audit.packing import EVENTS_PER_ROW
from convengine.db.models import AUDIT_TURN_MODELS

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    existed = inspector.has_table("ce_audit_turn")
    for model in AUDIT_TURN_MODELS:
        model.__table__.create(bind, checkfirst=True)
    if existed or not inspector.has_table("ce_audit"):
        return
    highest = bind.execute(sa.text("SELECT max(audit_id) FROM ce_audit")).scalar()
    if not highest:
        return
    first = int(highest) // EVENTS_PER_ROW + 1
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("SELECT setval(pg_get_serial_sequence('ce_audit_turn', 'audit_turn_id'), :n, false)"),
                     {"n": first})
    else:
        bind.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('ce_audit_turn', :n)"), {"n": first - 1})


def downgrade() -> None:
    bind = op.get_bind()
    for model in reversed(AUDIT_TURN_MODELS):
        model.__table__.drop(bind, checkfirst=True)
