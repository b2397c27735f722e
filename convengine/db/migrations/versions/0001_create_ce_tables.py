"""create ce tables

Revision ID: 0001
Revises: 
Create Date: 2026-11-22 02:09:05.922364
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from convengine.db import models

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _missing(name: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    """Create every ce_* table that does not exist yet (ConvEngine databases keep theirs)."""
    if _missing('ce_config'):
        op.create_table('ce_config',
        sa.Column('config_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('config_type', sa.Text(), nullable=False),
        sa.Column('config_key', sa.Text(), nullable=False),
        sa.Column('config_value', sa.Text(), nullable=True),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('config_id', name=op.f('pk_ce_config')),
        sa.UniqueConstraint('config_type', 'config_key', name=op.f('uq_ce_config_config_type_config_key'))
        )
    if _missing('ce_container_config'):
        op.create_table('ce_container_config',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=False),
        sa.Column('state_code', sa.Text(), nullable=False),
        sa.Column('page_id', sa.Integer(), nullable=True),
        sa.Column('section_id', sa.Integer(), nullable=True),
        sa.Column('container_id', sa.Integer(), nullable=True),
        sa.Column('input_param_name', sa.Text(), nullable=False),
        sa.Column('priority', sa.Integer(), server_default='1', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_ce_container_config'))
        )
    if _missing('ce_conversation'):
        op.create_table('ce_conversation',
        sa.Column('conversation_id', sa.Uuid(as_uuid=False).with_variant(sa.String(length=36), 'sqlite'), nullable=False),
        sa.Column('status', sa.Text(), server_default='RUNNING', nullable=False),
        sa.Column('intent_code', sa.Text(), server_default='UNKNOWN', nullable=False),
        sa.Column('state_code', sa.Text(), server_default='UNKNOWN', nullable=False),
        sa.Column('context_json', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=False),
        sa.Column('last_user_text', sa.Text(), nullable=True),
        sa.Column('last_assistant_json', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=True),
        sa.Column('input_params_json', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.Column('updated_at', models.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('conversation_id', name=op.f('pk_ce_conversation'))
        )
    if _missing('ce_intent'):
        op.create_table('ce_intent',
        sa.Column('intent_code', sa.Text(), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.Column('display_name', sa.Text(), nullable=True),
        sa.Column('llm_hint', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('intent_code', name=op.f('pk_ce_intent'))
        )
    if _missing('ce_intent_classifier'):
        op.create_table('ce_intent_classifier',
        sa.Column('classifier_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=False),
        sa.Column('state_code', sa.Text(), server_default='UNKNOWN', nullable=False),
        sa.Column('rule_type', sa.Text(), nullable=False),
        sa.Column('pattern', sa.Text(), nullable=False),
        sa.Column('priority', sa.Integer(), nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('classifier_id', name=op.f('pk_ce_intent_classifier'))
        )
    if _missing('ce_llm_call_log'):
        op.create_table('ce_llm_call_log',
        sa.Column('llm_call_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('conversation_id', sa.Uuid(as_uuid=False).with_variant(sa.String(length=36), 'sqlite'), nullable=True),
        sa.Column('intent_code', sa.Text(), nullable=True),
        sa.Column('state_code', sa.Text(), nullable=True),
        sa.Column('provider', sa.Text(), nullable=True),
        sa.Column('model', sa.Text(), nullable=True),
        sa.Column('temperature', sa.Numeric(precision=3, scale=2), nullable=True),
        sa.Column('prompt_text', sa.Text(), nullable=True),
        sa.Column('user_context', sa.Text(), nullable=True),
        sa.Column('response_text', sa.Text(), nullable=True),
        sa.Column('success', sa.Boolean(), nullable=True),
        sa.Column('error_message', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('llm_call_id', name=op.f('pk_ce_llm_call_log'))
        )
    if _missing('ce_mcp_planner'):
        op.create_table('ce_mcp_planner',
        sa.Column('planner_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('state_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('system_prompt', sa.Text(), nullable=False),
        sa.Column('user_prompt', sa.Text(), nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('planner_id', name=op.f('pk_ce_mcp_planner'))
        )
    if _missing('ce_mcp_tool'):
        op.create_table('ce_mcp_tool',
        sa.Column('tool_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('tool_code', sa.Text(), nullable=False),
        sa.Column('tool_group', sa.Text(), nullable=True),
        sa.Column('intent_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('state_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('tool_id', name=op.f('pk_ce_mcp_tool')),
        sa.UniqueConstraint('tool_code', name=op.f('uq_ce_mcp_tool_tool_code'))
        )
    if _missing('ce_memory'):
        op.create_table('ce_memory',
        sa.Column('memory_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('state_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('recent_turns', sa.Integer(), server_default='3', nullable=False),
        sa.Column('summary_max_chars', sa.Integer(), server_default='1200', nullable=False),
        sa.Column('system_prompt', sa.Text(), nullable=True),
        sa.Column('user_prompt', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('memory_id', name=op.f('pk_ce_memory'))
        )
    if _missing('ce_output_schema'):
        op.create_table('ce_output_schema',
        sa.Column('schema_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=False),
        sa.Column('state_code', sa.Text(), nullable=False),
        sa.Column('schema_type', sa.Text(), server_default='SCHEMA_JSON', nullable=False),
        sa.Column('json_schema', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('priority', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('schema_id', name=op.f('pk_ce_output_schema'))
        )
    if _missing('ce_pending_action'):
        op.create_table('ce_pending_action',
        sa.Column('pending_action_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=True),
        sa.Column('state_code', sa.Text(), nullable=True),
        sa.Column('action_key', sa.Text(), nullable=False),
        sa.Column('bean_name', sa.Text(), nullable=False),
        sa.Column('method_names', sa.Text(), nullable=False),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('pending_action_id', name=op.f('pk_ce_pending_action'))
        )
    if _missing('ce_policy'):
        op.create_table('ce_policy',
        sa.Column('policy_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('rule_type', sa.Text(), nullable=False),
        sa.Column('pattern', sa.Text(), nullable=False),
        sa.Column('response_text', sa.Text(), nullable=False),
        sa.Column('priority', sa.Integer(), server_default='10', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('policy_id', name=op.f('pk_ce_policy'))
        )
    if _missing('ce_prompt_template'):
        op.create_table('ce_prompt_template',
        sa.Column('template_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=True),
        sa.Column('state_code', sa.Text(), nullable=True),
        sa.Column('output_format', sa.Text(), nullable=False),
        sa.Column('system_prompt', sa.Text(), nullable=True),
        sa.Column('user_prompt', sa.Text(), nullable=True),
        sa.Column('temperature', sa.Numeric(precision=3, scale=2), server_default='0', nullable=True),
        sa.Column('interaction_mode', sa.Text(), nullable=True),
        sa.Column('interaction_contract', sa.Text(), nullable=True),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('template_id', name=op.f('pk_ce_prompt_template'))
        )
    if _missing('ce_response'):
        op.create_table('ce_response',
        sa.Column('response_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=True),
        sa.Column('state_code', sa.Text(), nullable=False),
        sa.Column('output_format', sa.Text(), server_default='TEXT', nullable=False),
        sa.Column('response_type', sa.Text(), server_default='EXACT', nullable=False),
        sa.Column('exact_text', sa.Text(), nullable=True),
        sa.Column('derivation_hint', sa.Text(), nullable=True),
        sa.Column('json_schema', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=True),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('response_id', name=op.f('pk_ce_response'))
        )
    if _missing('ce_rule'):
        op.create_table('ce_rule',
        sa.Column('rule_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('phase', sa.Text(), server_default='PRE_RESPONSE_RESOLUTION', nullable=False),
        sa.Column('intent_code', sa.Text(), nullable=True),
        sa.Column('state_code', sa.Text(), nullable=True),
        sa.Column('rule_type', sa.Text(), nullable=False),
        sa.Column('match_pattern', sa.Text(), nullable=False),
        sa.Column('action', sa.Text(), nullable=False),
        sa.Column('action_value', sa.Text(), nullable=True),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('rule_id', name=op.f('pk_ce_rule'))
        )
        op.create_index(op.f('ix_ce_rule_enabled_phase_state_code_priority'), 'ce_rule', ['enabled', 'phase', 'state_code', 'priority'], unique=False)
    if _missing('ce_state_graph'):
        op.create_table('ce_state_graph',
        sa.Column('state_graph_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('from_state', sa.Text(), nullable=False),
        sa.Column('to_state', sa.Text(), nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('state_graph_id', name=op.f('pk_ce_state_graph'))
        )
    if _missing('ce_verbose'):
        op.create_table('ce_verbose',
        sa.Column('verbose_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('intent_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('state_code', sa.Text(), server_default='ANY', nullable=False),
        sa.Column('step_match', sa.Text(), server_default='EXACT', nullable=False),
        sa.Column('step_value', sa.Text(), nullable=False),
        sa.Column('determinant', sa.Text(), nullable=False),
        sa.Column('rule_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
        sa.Column('tool_code', sa.Text(), nullable=True),
        sa.Column('message', sa.Text(), nullable=True),
        sa.Column('error_message', sa.Text(), nullable=True),
        sa.Column('priority', sa.Integer(), server_default='100', nullable=False),
        sa.Column('enabled', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.PrimaryKeyConstraint('verbose_id', name=op.f('pk_ce_verbose'))
        )
    if _missing('ce_audit'):
        op.create_table('ce_audit',
        sa.Column('audit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('conversation_id', sa.Uuid(as_uuid=False).with_variant(sa.String(length=36), 'sqlite'), nullable=False),
        sa.Column('stage', sa.Text(), nullable=False),
        sa.Column('payload_json', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.ForeignKeyConstraint(['conversation_id'], ['ce_conversation.conversation_id'], name=op.f('fk_ce_audit_conversation_id_ce_conversation'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('audit_id', name=op.f('pk_ce_audit'))
        )
        op.create_index(op.f('ix_ce_audit_conversation_id_created_at'), 'ce_audit', ['conversation_id', 'created_at'], unique=False)
    if _missing('ce_conversation_history'):
        op.create_table('ce_conversation_history',
        sa.Column('history_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('conversation_id', sa.Uuid(as_uuid=False).with_variant(sa.String(length=36), 'sqlite'), nullable=False),
        sa.Column('user_input', sa.Text(), nullable=False),
        sa.Column('assistant_output', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.Column('modified_at', models.UtcDateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['conversation_id'], ['ce_conversation.conversation_id'], name=op.f('fk_ce_conversation_history_conversation_id_ce_conversation'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('history_id', name=op.f('pk_ce_conversation_history'))
        )
        op.create_index(op.f('ix_ce_conversation_history_conversation_id_history_id'), 'ce_conversation_history', ['conversation_id', 'history_id'], unique=False)
    if _missing('ce_mcp_db_tool'):
        op.create_table('ce_mcp_db_tool',
        sa.Column('tool_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=False, nullable=False),
        sa.Column('dialect', sa.Text(), server_default='POSTGRES', nullable=False),
        sa.Column('sql_template', sa.Text(), nullable=False),
        sa.Column('param_schema', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=False),
        sa.Column('safe_mode', sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column('max_rows', sa.Integer(), server_default='200', nullable=False),
        sa.Column('allowed_identifiers', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql').with_variant(models.JsonText(), 'sqlite'), nullable=True),
        sa.Column('created_at', models.UtcDateTime(timezone=True), server_default=sa.func.now(), nullable=True),
        sa.ForeignKeyConstraint(['tool_id'], ['ce_mcp_tool.tool_id'], name=op.f('fk_ce_mcp_db_tool_tool_id_ce_mcp_tool'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('tool_id', name=op.f('pk_ce_mcp_db_tool'))
        )


def downgrade() -> None:
    op.drop_table('ce_mcp_db_tool')
    op.drop_table('ce_conversation_history')
    op.drop_table('ce_audit')
    op.drop_table('ce_verbose')
    op.drop_table('ce_state_graph')
    op.drop_table('ce_rule')
    op.drop_table('ce_response')
    op.drop_table('ce_prompt_template')
    op.drop_table('ce_policy')
    op.drop_table('ce_pending_action')
    op.drop_table('ce_output_schema')
    op.drop_table('ce_memory')
    op.drop_table('ce_mcp_tool')
    op.drop_table('ce_mcp_planner')
    op.drop_table('ce_llm_call_log')
    op.drop_table('ce_intent_classifier')
    op.drop_table('ce_intent')
    op.drop_table('ce_conversation')
    op.drop_table('ce_container_config')
    op.drop_table('ce_config')
