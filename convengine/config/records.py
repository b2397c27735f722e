"""Frozen records, one per control-table row, as the runtime sees them.

Field names are the ``ce_*`` column names. Scope codes are trimmed and upper-cased, rule
phases are canonical (aliases resolved), and compiled matchers ride along (excluded from
equality). Records are built by :mod:`convengine.config_loader.build` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from convengine._internal.textmatch import TextMatcher


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    TABLE: ClassVar[str] = ""
    ID: ClassVar[str] = ""

    @property
    def row_id(self) -> Any:
        return getattr(self, self.ID)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRow(Record):
    TABLE: ClassVar[str] = "ce_config"
    ID: ClassVar[str] = "config_id"
    config_id: int
    config_type: str
    config_key: str
    config_value: str | None = None
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentRecord(Record):
    TABLE: ClassVar[str] = "ce_intent"
    ID: ClassVar[str] = "intent_code"
    intent_code: str
    description: str
    priority: int = 100
    enabled: bool = True
    display_name: str | None = None
    llm_hint: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassifierRecord(Record):
    TABLE: ClassVar[str] = "ce_intent_classifier"
    ID: ClassVar[str] = "classifier_id"
    classifier_id: int
    intent_code: str
    state_code: str = "UNKNOWN"
    rule_type: str
    pattern: str
    priority: int
    enabled: bool = True
    description: str | None = None
    matcher: TextMatcher | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputSchemaRecord(Record):
    TABLE: ClassVar[str] = "ce_output_schema"
    ID: ClassVar[str] = "schema_id"
    schema_id: int
    intent_code: str
    state_code: str
    schema_type: str = "SCHEMA_JSON"
    json_schema: Any
    description: str | None = None
    enabled: bool = True
    priority: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptTemplateRecord(Record):
    TABLE: ClassVar[str] = "ce_prompt_template"
    ID: ClassVar[str] = "template_id"
    template_id: int
    intent_code: str | None = None
    state_code: str | None = None
    output_format: str
    system_prompt: str | None = None
    user_prompt: str | None = None
    temperature: float | None = 0.0
    interaction_mode: str | None = None
    interaction_contract: str | None = None
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseRecord(Record):
    TABLE: ClassVar[str] = "ce_response"
    ID: ClassVar[str] = "response_id"
    response_id: int
    intent_code: str | None = None
    state_code: str
    output_format: str = "TEXT"
    response_type: str = "EXACT"
    exact_text: str | None = None
    derivation_hint: str | None = None
    json_schema: Any = None
    priority: int = 100
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleRecord(Record):
    TABLE: ClassVar[str] = "ce_rule"
    ID: ClassVar[str] = "rule_id"
    rule_id: int
    phase: str = "PRE_RESPONSE_RESOLUTION"
    intent_code: str = "ANY"
    state_code: str = "ANY"
    rule_type: str
    match_pattern: str
    action: str
    action_value: str | None = None
    priority: int = 100
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)
    matcher: Any = field(default=None, compare=False, repr=False)
    """A compiled TextMatcher (REGEX) or jsonpath expression (JSON_PATH, CONTEXT_JSON_PATH)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyRecord(Record):
    TABLE: ClassVar[str] = "ce_policy"
    ID: ClassVar[str] = "policy_id"
    policy_id: int
    rule_type: str
    pattern: str
    response_text: str
    priority: int = 10
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)
    matcher: TextMatcher | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingActionRecord(Record):
    TABLE: ClassVar[str] = "ce_pending_action"
    ID: ClassVar[str] = "pending_action_id"
    pending_action_id: int
    intent_code: str = "ANY"
    state_code: str = "ANY"
    action_key: str
    bean_name: str
    method_names: str
    priority: int = 100
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)

    @property
    def action_ref(self) -> str:
        return f"{self.bean_name}:{self.method_names}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerConfigRecord(Record):
    TABLE: ClassVar[str] = "ce_container_config"
    ID: ClassVar[str] = "id"
    id: int
    intent_code: str
    state_code: str
    page_id: int | None = None
    section_id: int | None = None
    container_id: int | None = None
    input_param_name: str
    priority: int = 1
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRecord(Record):
    TABLE: ClassVar[str] = "ce_mcp_tool"
    ID: ClassVar[str] = "tool_id"
    tool_id: int
    tool_code: str
    tool_group: str | None = None
    intent_code: str = "ANY"
    state_code: str = "ANY"
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)
    group: str = field(default="DB", compare=False)
    """The canonical tool group (aliases resolved, blank -> DB)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DbToolRecord(Record):
    TABLE: ClassVar[str] = "ce_mcp_db_tool"
    ID: ClassVar[str] = "tool_id"
    tool_id: int
    dialect: str = "POSTGRES"
    sql_template: str
    param_schema: Any = None
    safe_mode: bool = True
    max_rows: int = 200
    allowed_identifiers: Any = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerRecord(Record):
    TABLE: ClassVar[str] = "ce_mcp_planner"
    ID: ClassVar[str] = "planner_id"
    planner_id: int
    intent_code: str = "ANY"
    state_code: str = "ANY"
    system_prompt: str
    user_prompt: str
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class VerboseRecord(Record):
    TABLE: ClassVar[str] = "ce_verbose"
    ID: ClassVar[str] = "verbose_id"
    verbose_id: int
    intent_code: str = "ANY"
    state_code: str = "ANY"
    step_match: str = "EXACT"
    step_value: str
    determinant: str
    rule_id: int | None = None
    tool_code: str | None = None
    message: str | None = None
    error_message: str | None = None
    priority: int = 100
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)
    matcher: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateGraphRecord(Record):
    TABLE: ClassVar[str] = "ce_state_graph"
    ID: ClassVar[str] = "state_graph_id"
    state_graph_id: int
    intent_code: str = "ANY"
    from_state: str
    to_state: str
    enabled: bool = True
    description: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRecord(Record):
    TABLE: ClassVar[str] = "ce_memory"
    ID: ClassVar[str] = "memory_id"
    memory_id: int
    intent_code: str = "ANY"
    state_code: str = "ANY"
    enabled: bool = True
    priority: int = 100
    recent_turns: int = 3
    summary_max_chars: int = 1200
    system_prompt: str | None = None
    user_prompt: str | None = None
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowRecord(Record):
    TABLE: ClassVar[str] = "ce_flow"
    ID: ClassVar[str] = "flow_code"
    flow_code: str
    description: str | None = None
    intent_code: str | None = None
    entry_node: str | None = None
    kind: str = "flow"
    priority: int = 100
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowNodeRecord(Record):
    TABLE: ClassVar[str] = "ce_flow_node"
    ID: ClassVar[str] = "flow_node_id"
    flow_node_id: int
    flow_code: str
    node_id: str
    node_type: str
    config: Any = None
    description: str | None = None
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowEdgeRecord(Record):
    TABLE: ClassVar[str] = "ce_flow_edge"
    ID: ClassVar[str] = "flow_edge_id"
    flow_edge_id: int
    flow_code: str
    from_node: str
    to_node: str
    outcome: str | None = None
    condition: str | None = None
    priority: int = 100
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)



@dataclass(frozen=True, slots=True, kw_only=True)
class ChainRecord(Record):
    TABLE: ClassVar[str] = "ce_chain"
    ID: ClassVar[str] = "chain_code"
    chain_code: str
    description: str | None = None
    every_s: int | None = None
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainStepRecord(Record):
    TABLE: ClassVar[str] = "ce_chain_step"
    ID: ClassVar[str] = "chain_step_id"
    chain_step_id: int
    chain_code: str
    step_id: str
    step_type: str
    position: int = 100
    config: Any = None
    description: str | None = None
    enabled: bool = True
    created_at: datetime | None = field(default=None, compare=False, repr=False)

RECORD_TYPES: dict[str, type[Record]] = {
    r.TABLE: r
    for r in (
        ConfigRow,
        IntentRecord,
        ClassifierRecord,
        OutputSchemaRecord,
        PromptTemplateRecord,
        ResponseRecord,
        RuleRecord,
        PolicyRecord,
        PendingActionRecord,
        ContainerConfigRecord,
        ToolRecord,
        DbToolRecord,
        PlannerRecord,
        VerboseRecord,
        StateGraphRecord,
        MemoryRecord,
        FlowRecord,
        FlowNodeRecord,
        FlowEdgeRecord,
        ChainRecord,
        ChainStepRecord,
    )
}
