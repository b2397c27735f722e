"""The ce_* tables as ConvEngine releases created them, for upgrade tests.

Each generation is described column by column (name, type, NOT NULL, default) the way
ConvEngine's DDL declares it for PostgreSQL and SQLite, so a test can build a database exactly
as a ConvEngine user has it, fill it as ConvEngine does, and upgrade it.

- ``2.0.20``: ConvEngine 2.0.1x-2.0.2x (``output_format``, ``schema_type``, interaction columns).
- ``2.0.9``: prompt templates still say ``response_type``; no ``schema_type``.
- ``2.0.5``: also no interaction columns, no ``ce_verbose``, no classifier ``state_code``, no planner.
- ``2.0.0``: also one history row per entry (``entry_type``, ``role``, ``stage``, ``content_text``).
"""

from __future__ import annotations

import sqlalchemy as sa

# name: "column type [nn] [default=X] [pk] [unique] [ref=table.column]" separated by ";"
CURRENT: dict[str, str] = {
    "ce_config": "config_id int nn pk; config_type text nn; config_key text nn; config_value text nn; "
                 "enabled bool nn default=true; created_at ts nn default=now",
    "ce_container_config": "id serial; intent_code text nn; state_code text nn; page_id int nn; section_id int nn; "
                           "container_id int nn; input_param_name text nn; priority int nn default=1; "
                           "enabled bool nn default=true; created_at ts nn default=now",
    "ce_conversation": "conversation_id uuid nn pk; status text nn; intent_code text nn default='UNKNOWN'; "
                       "state_code text nn default='UNKNOWN'; context_json json nn default='{}'; "
                       "last_user_text text; last_assistant_json json; input_params_json json nn default='{}'; "
                       "created_at ts nn default=now; updated_at ts nn default=now",
    "ce_intent": "intent_code text nn pk; description text nn; priority int nn default=100; "
                 "enabled bool nn default=true; created_at ts nn default=now; display_name text; llm_hint text",
    "ce_intent_classifier": "classifier_id serial; rule_type text nn; pattern text nn; intent_code text nn; "
                            "state_code text nn default='UNKNOWN'; priority int nn; enabled bool default=true; "
                            "description text",
    "ce_llm_call_log": "llm_call_id serial; conversation_id uuid nn; intent_code text nn default='UNKNOWN'; "
                       "state_code text nn default='UNKNOWN'; provider text nn; model text nn; temperature num; "
                       "prompt_text text nn; user_context text nn; response_text text; success bool nn; "
                       "error_message text; created_at ts nn default=now",
    "ce_mcp_tool": "tool_id serial; tool_code text nn unique; tool_group text nn; intent_code text nn; "
                   "state_code text nn; enabled bool nn default=true; description text; created_at ts nn default=now",
    "ce_output_schema": "schema_id serial; intent_code text nn; state_code text nn; "
                        "schema_type text nn default='SCHEMA_JSON'; json_schema json nn; description text; "
                        "enabled bool default=true; priority int nn",
    "ce_policy": "policy_id serial; rule_type text nn; pattern text nn; response_text text nn; "
                 "priority int nn default=10; enabled bool nn default=true; description text; "
                 "created_at ts nn default=now",
    "ce_prompt_template": "template_id serial; intent_code text nn; state_code text nn; output_format text nn; "
                          "system_prompt text nn; user_prompt text nn; temperature num nn default=0.0; "
                          "interaction_mode text; interaction_contract text; enabled bool nn default=true; "
                          "created_at ts nn default=now",
    "ce_response": "response_id serial; intent_code text nn; state_code text nn; output_format text nn; "
                   "response_type text nn; exact_text text; derivation_hint text; json_schema json; "
                   "priority int nn default=100; enabled bool nn default=true; description text; "
                   "created_at ts nn default=now",
    "ce_rule": "rule_id serial; phase text nn default='PRE_RESPONSE_RESOLUTION'; intent_code text nn; "
               "state_code text nn; rule_type text nn; match_pattern text nn; action text nn; action_value text; "
               "priority int nn default=100; enabled bool nn default=true; description text; "
               "created_at ts nn default=now",
    "ce_verbose": "verbose_id serial; intent_code text nn; state_code text nn; step_match text nn default='EXACT'; "
                  "step_value text nn; determinant text nn; rule_id int; tool_code text; message text; "
                  "error_message text; priority int nn default=100; enabled bool nn default=true; "
                  "created_at ts nn default=now",
    "ce_pending_action": "pending_action_id serial; intent_code text nn; state_code text nn; action_key text nn; "
                         "bean_name text nn; method_names text nn; priority int nn default=100; "
                         "enabled bool nn default=true; description text; created_at ts nn default=now",
    "ce_audit": "audit_id serial; conversation_id uuid nn ref=ce_conversation.conversation_id; stage text nn; "
                "payload_json json nn; created_at ts nn default=now",
    "ce_conversation_history": "history_id serial; conversation_id uuid nn ref=ce_conversation.conversation_id; "
                               "user_input text nn; assistant_output json; created_at ts nn default=now; "
                               "modified_at ts nn default=now",
    "ce_mcp_db_tool": "tool_id int nn pk ref=ce_mcp_tool.tool_id; dialect text nn default='POSTGRES'; "
                      "sql_template text nn; param_schema json nn; safe_mode bool nn default=true; "
                      "max_rows int nn default=200; created_at ts nn default=now; allowed_identifiers json",
    "ce_mcp_planner": "planner_id serial; intent_code text nn; state_code text nn; system_prompt text nn; "
                      "user_prompt text nn; enabled bool nn default=true; created_at ts nn default=now",
}

LEGACY_HISTORY = ("history_id serial; conversation_id uuid nn ref=ce_conversation.conversation_id; "
                  "entry_type text nn; role text nn; stage text nn; content_text text; payload_json json; "
                  "created_at ts nn default=now")


def generation(name: str) -> dict[str, str]:
    """The tables of one ConvEngine generation (see the module docstring)."""
    tables = dict(CURRENT)
    if name == "2.0.20":
        return tables
    tables["ce_prompt_template"] = tables["ce_prompt_template"].replace("output_format text nn",
                                                                        "response_type text nn")
    tables["ce_output_schema"] = _without(tables["ce_output_schema"], "schema_type")
    if name == "2.0.9":
        return tables
    tables["ce_prompt_template"] = _without(_without(tables["ce_prompt_template"], "interaction_mode"),
                                            "interaction_contract")
    tables["ce_intent_classifier"] = _without(tables["ce_intent_classifier"], "state_code")
    del tables["ce_verbose"], tables["ce_mcp_planner"]
    if name == "2.0.5":
        return tables
    assert name == "2.0.0", name
    tables["ce_conversation_history"] = LEGACY_HISTORY
    return tables


def _without(spec: str, column: str) -> str:
    return "; ".join(part for part in spec.split("; ") if part.split()[0] != column)


_TYPES = {
    "postgresql": {"text": "text", "int": "int8", "bool": "bool", "json": "jsonb", "uuid": "uuid",
                   "ts": "timestamptz", "num": "numeric(3, 2)", "serial": "bigserial PRIMARY KEY"},
    "sqlite": {"text": "TEXT", "int": "INTEGER", "bool": "BOOLEAN", "json": "TEXT", "uuid": "TEXT",
               "ts": "TIMESTAMP", "num": "NUMERIC", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"},
}
_DEFAULTS = {"now": {"postgresql": "now()", "sqlite": "CURRENT_TIMESTAMP"}, "true": {"postgresql": "true",
                                                                                   "sqlite": "1"}}


def create(connection: sa.Connection, tables: dict[str, str]) -> None:
    """CREATE TABLE every table of ``tables`` on ``connection``'s dialect, parents first."""
    dialect = connection.dialect.name
    ordered = sorted(tables, key=lambda t: "ref=" in tables[t])
    for table in ordered:
        columns = ", ".join(_column(part.split(), dialect) for part in tables[table].split("; "))
        connection.exec_driver_sql(f"CREATE TABLE {table} ({columns})")


def _column(words: list[str], dialect: str) -> str:
    name, kind, *flags = words
    parts = [name if name != "action" else '"action"', _TYPES[dialect][kind]]
    for flag in flags:
        if flag == "nn":
            parts.append("NOT NULL")
        elif flag == "pk":
            parts.append("PRIMARY KEY")
        elif flag == "unique":
            parts.append("UNIQUE")
        elif flag.startswith("default="):
            value = flag.removeprefix("default=")
            parts.append(f"DEFAULT {_DEFAULTS.get(value, {}).get(dialect, value)}")
        elif flag.startswith("ref="):
            table, column = flag.removeprefix("ref=").split(".")
            parts.append(f"REFERENCES {table}({column}) ON DELETE CASCADE")
    return " ".join(parts)
