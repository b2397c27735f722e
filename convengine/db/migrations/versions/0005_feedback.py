"""user feedback

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 00:00:00

``ce_mcp_user_feedback``: ConvEngine's table for thumbs-up/down feedback on an answer
(``POST /api/v1/conversation/feedback``), with the intent, state and texts of the turn it refers to.
Created only when missing, so a database ConvEngine created keeps its table and rows.
"""

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from convengine.db import models

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLE = "ce_mcp_user_feedback"


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(models.JsonText(), "sqlite")


def upgrade() -> None:
    if TABLE in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        TABLE,
        sa.Column("feedback_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True,
                  nullable=False),
        sa.Column("conversation_id", sa.Uuid(as_uuid=False).with_variant(sa.String(36), "sqlite"), nullable=False),
        sa.Column("feedback_type", sa.String(32), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=True),
        sa.Column("intent_code", sa.String(255), nullable=True),
        sa.Column("state_code", sa.String(255), nullable=True),
        sa.Column("user_query", sa.Text(), nullable=True),
        sa.Column("assistant_response", sa.Text(), nullable=True),
        sa.Column("mcp_tool_code", sa.String(255), nullable=True),
        sa.Column("captured_query_knowledge_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("applied_query_knowledge_json", _json(), nullable=True),
        sa.Column("metadata_json", _json(), nullable=True),
        sa.Column("created_at", models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["ce_conversation.conversation_id"],
                                name=op.f("fk_ce_mcp_user_feedback_conversation_id_ce_conversation"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("feedback_id", name=op.f("pk_ce_mcp_user_feedback")),
    )
    op.create_index(op.f("ix_ce_mcp_user_feedback_conversation_id_created_at"), TABLE,
                    ["conversation_id", "created_at"], unique=False)


def downgrade() -> None:
    if TABLE in sa.inspect(op.get_bind()).get_table_names():
        op.drop_table(TABLE)
