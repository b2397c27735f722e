"""The ce_* tables: ConvEngine's names and columns, created by the migration on both backends."""

from __future__ import annotations

import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.db.models import MODEL_BY_TABLE

# ConvEngine's columns (reference §1.1-1.2) plus ce_state_graph and ce_memory from the seeds.
EXPECTED_COLUMNS = {
    "ce_config": "config_id config_type config_key config_value enabled created_at",
    "ce_intent": "intent_code description priority enabled created_at display_name llm_hint",
    "ce_intent_classifier": "classifier_id intent_code state_code rule_type pattern priority enabled description",
    "ce_output_schema": "schema_id intent_code state_code schema_type json_schema description enabled priority",
    "ce_prompt_template": "template_id intent_code state_code output_format system_prompt user_prompt temperature "
    "interaction_mode interaction_contract enabled created_at",
    "ce_response": "response_id intent_code state_code output_format response_type exact_text derivation_hint "
    "json_schema priority enabled description created_at",
    "ce_rule": "rule_id phase intent_code state_code rule_type match_pattern action action_value priority enabled "
    "description created_at",
    "ce_policy": "policy_id rule_type pattern response_text priority enabled description created_at",
    "ce_pending_action": "pending_action_id intent_code state_code action_key bean_name method_names priority enabled "
    "description created_at",
    "ce_container_config": "id intent_code state_code page_id section_id container_id input_param_name priority "
    "enabled created_at",
    "ce_mcp_tool": "tool_id tool_code tool_group intent_code state_code enabled description created_at",
    "ce_mcp_db_tool": "tool_id dialect sql_template param_schema safe_mode max_rows allowed_identifiers created_at",
    "ce_mcp_planner": "planner_id intent_code state_code system_prompt user_prompt enabled created_at",
    "ce_verbose": "verbose_id intent_code state_code step_match step_value determinant rule_id tool_code message "
    "error_message priority enabled created_at",
    "ce_conversation": "conversation_id status intent_code state_code context_json last_user_text last_assistant_json "
    "input_params_json created_at updated_at owner_id user_id lifecycle",
    "ce_audit": "audit_id conversation_id stage payload_json created_at",
    "ce_conversation_history": "history_id conversation_id user_input assistant_output created_at modified_at "
                               "undone",
    "ce_llm_call_log": "llm_call_id conversation_id intent_code state_code provider model temperature prompt_text "
    "user_context response_text success error_message created_at",
    "ce_mcp_user_feedback": "feedback_id conversation_id feedback_type message_id intent_code state_code user_query "
    "assistant_response mcp_tool_code captured_query_knowledge_count applied_query_knowledge_json metadata_json "
    "created_at",
    "ce_state_graph": "state_graph_id intent_code from_state to_state enabled description created_at",
    "ce_memory": "memory_id intent_code state_code enabled priority recent_turns summary_max_chars system_prompt "
    "user_prompt created_at",
    # convengine's own: conversation flows
    "ce_flow": "flow_code description intent_code entry_node kind priority enabled created_at",
    "ce_flow_node": "flow_node_id flow_code node_id node_type config description enabled created_at",
    "ce_flow_edge": "flow_edge_id flow_code from_node to_node outcome condition priority enabled created_at",
    "ce_chain": "chain_code description every_s enabled created_at",
    "ce_chain_step": "chain_step_id chain_code step_id step_type position config description enabled created_at",
}

JSON_COLUMNS = {
    ("ce_output_schema", "json_schema"), ("ce_response", "json_schema"), ("ce_mcp_db_tool", "param_schema"),
    ("ce_mcp_db_tool", "allowed_identifiers"), ("ce_conversation", "context_json"),
    ("ce_conversation", "last_assistant_json"), ("ce_conversation", "input_params_json"),
    ("ce_audit", "payload_json"), ("ce_conversation_history", "assistant_output"),
    ("ce_mcp_user_feedback", "applied_query_knowledge_json"), ("ce_mcp_user_feedback", "metadata_json"),
    ("ce_audit", "payload_json"), ("ce_conversation_history", "assistant_output"), ("ce_flow_node", "config"),
}


def test_models_have_convengine_columns() -> None:
    assert set(MODEL_BY_TABLE) == set(EXPECTED_COLUMNS)
    for table, expected in EXPECTED_COLUMNS.items():
        actual = [c.name for c in MODEL_BY_TABLE[table].__table__.columns]
        assert actual == expected.split(), table


def test_migration_creates_every_table_with_its_columns(empty_db_url: str) -> None:
    url = parse_database_url(empty_db_url)
    upgrade(url)
    upgrade(url)  # idempotent
    engine = create_sync_engine(url)
    inspector = sa.inspect(engine)
    try:
        for table, expected in EXPECTED_COLUMNS.items():
            columns = {c["name"]: c for c in inspector.get_columns(table)}
            assert list(columns) == expected.split(), table
            for (t, column) in JSON_COLUMNS:
                if t == table:
                    type_name = type(columns[column]["type"]).__name__.upper()
                    assert type_name == ("JSONB" if url.is_postgres else "TEXT"), (table, column, type_name)
    finally:
        engine.dispose()


def test_upgrade_keeps_tables_created_by_convengine(empty_db_url: str) -> None:
    """A database built by ConvEngine's DDL keeps its rows; the missing tables are added."""
    url = parse_database_url(empty_db_url)
    engine = create_sync_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE ce_intent (intent_code text PRIMARY KEY, description text NOT NULL, "
                             "priority int DEFAULT 100, enabled boolean DEFAULT true, created_at timestamp, "
                             "display_name text, llm_hint text)"))
        conn.execute(sa.text("INSERT INTO ce_intent (intent_code, description) VALUES ('FAQ', 'questions')"))
    upgrade(url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT intent_code FROM ce_intent")).scalar_one() == "FAQ"
        tables = set(sa.inspect(conn).get_table_names())
    engine.dispose()
    assert {"ce_state_graph", "ce_memory", "ce_rule", "ce_audit"} <= tables
