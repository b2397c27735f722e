"""SQLAlchemy models of the ``ce_*`` tables, with ConvEngine's table and column names.

JSON columns are ``jsonb`` on PostgreSQL and TEXT (holding JSON) on SQLite; booleans are
0/1 on SQLite. Control tables (read into the ConfigSnapshot) are listed in
:data:`CONTROL_TABLES` in pack order; runtime tables in :data:`RUNTIME_TABLES`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from convengine._internal.jsontext import dumps


def utcnow() -> datetime:
    return datetime.now(UTC)


class JsonText(TypeDecorator[Any]):
    """JSON kept as TEXT (SQLite), serialised with ``json.dumps``."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: object, dialect: sa.Dialect) -> str | None:
        if value is None:
            return None
        return dumps(value)

    def process_result_value(self, value: str | bytes | dict[str, Any] | list[Any] | None,
                             dialect: sa.Dialect) -> Any:
        if value is None or value == "":
            return None
        if isinstance(value, (dict, list)):
            return value
        return json.loads(value)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware timestamps; SQLite keeps ISO text, PostgreSQL ``timestamptz``."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(JsonText(), "sqlite")
UUID = sa.Uuid(as_uuid=False).with_variant(sa.String(36), "sqlite")
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING)
    __table__: ClassVar[sa.Table]  # every model here is declared on a Table (not a join or select)


def _id() -> Mapped[int]:
    return mapped_column(BIGID, primary_key=True, autoincrement=True)


def _enabled() -> Mapped[bool]:
    return mapped_column(sa.Boolean, nullable=False, default=True, server_default=sa.true())


def _created() -> Mapped[datetime | None]:
    return mapped_column(UtcDateTime, default=utcnow, server_default=sa.func.now())


def _scope(default: str | None = None) -> Mapped[str | None]:
    return mapped_column(sa.Text, nullable=default is None, default=default)


# --- control plane ---------------------------------------------------------------------


class CeConfig(Base):
    __tablename__ = "ce_config"
    __table_args__ = (sa.UniqueConstraint("config_type", "config_key"),)
    config_id: Mapped[int] = _id()
    config_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    config_key: Mapped[str] = mapped_column(sa.Text, nullable=False)
    config_value: Mapped[str | None] = mapped_column(sa.Text)
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeIntent(Base):
    __tablename__ = "ce_intent"
    intent_code: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    description: Mapped[str] = mapped_column(sa.Text, nullable=False)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()
    display_name: Mapped[str | None] = mapped_column(sa.Text)
    llm_hint: Mapped[str | None] = mapped_column(sa.Text)


class CeIntentClassifier(Base):
    __tablename__ = "ce_intent_classifier"
    classifier_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="UNKNOWN", server_default="UNKNOWN")
    rule_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    pattern: Mapped[str] = mapped_column(sa.Text, nullable=False)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)


class CeOutputSchema(Base):
    __tablename__ = "ce_output_schema"
    schema_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    schema_type: Mapped[str] = mapped_column(
        sa.Text, nullable=False, default="SCHEMA_JSON", server_default="SCHEMA_JSON"
    )
    json_schema: Mapped[Any] = mapped_column(JSON, nullable=False)
    description: Mapped[str | None] = mapped_column(sa.Text)
    enabled: Mapped[bool] = _enabled()
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False)


class CePromptTemplate(Base):
    __tablename__ = "ce_prompt_template"
    template_id: Mapped[int] = _id()
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    state_code: Mapped[str | None] = mapped_column(sa.Text)
    output_format: Mapped[str] = mapped_column(sa.Text, nullable=False)
    system_prompt: Mapped[str | None] = mapped_column(sa.Text)
    user_prompt: Mapped[str | None] = mapped_column(sa.Text)
    temperature: Mapped[Any] = mapped_column(sa.Numeric(3, 2), nullable=True, default=0, server_default="0")
    interaction_mode: Mapped[str | None] = mapped_column(sa.Text)
    interaction_contract: Mapped[str | None] = mapped_column(sa.Text)
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeResponse(Base):
    __tablename__ = "ce_response"
    response_id: Mapped[int] = _id()
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    output_format: Mapped[str] = mapped_column(sa.Text, nullable=False, default="TEXT", server_default="TEXT")
    response_type: Mapped[str] = mapped_column(sa.Text, nullable=False, default="EXACT", server_default="EXACT")
    exact_text: Mapped[str | None] = mapped_column(sa.Text)
    derivation_hint: Mapped[str | None] = mapped_column(sa.Text)
    json_schema: Mapped[Any] = mapped_column(JSON, nullable=True)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeRule(Base):
    __tablename__ = "ce_rule"
    __table_args__ = (sa.Index(None, "enabled", "phase", "state_code", "priority"),)
    rule_id: Mapped[int] = _id()
    phase: Mapped[str] = mapped_column(
        sa.Text, nullable=False, default="PRE_RESPONSE_RESOLUTION", server_default="PRE_RESPONSE_RESOLUTION"
    )
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    state_code: Mapped[str | None] = mapped_column(sa.Text)
    rule_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    match_pattern: Mapped[str] = mapped_column(sa.Text, nullable=False)
    action: Mapped[str] = mapped_column(sa.Text, nullable=False)
    action_value: Mapped[str | None] = mapped_column(sa.Text)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CePolicy(Base):
    __tablename__ = "ce_policy"
    policy_id: Mapped[int] = _id()
    rule_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    pattern: Mapped[str] = mapped_column(sa.Text, nullable=False)
    response_text: Mapped[str] = mapped_column(sa.Text, nullable=False)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=10, server_default="10")
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CePendingAction(Base):
    __tablename__ = "ce_pending_action"
    pending_action_id: Mapped[int] = _id()
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    state_code: Mapped[str | None] = mapped_column(sa.Text)
    action_key: Mapped[str] = mapped_column(sa.Text, nullable=False)
    bean_name: Mapped[str] = mapped_column(sa.Text, nullable=False)
    method_names: Mapped[str] = mapped_column(sa.Text, nullable=False)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeContainerConfig(Base):
    __tablename__ = "ce_container_config"
    id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    page_id: Mapped[int | None] = mapped_column(sa.Integer)
    section_id: Mapped[int | None] = mapped_column(sa.Integer)
    container_id: Mapped[int | None] = mapped_column(sa.Integer)
    input_param_name: Mapped[str] = mapped_column(sa.Text, nullable=False)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=1, server_default="1")
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeMcpTool(Base):
    __tablename__ = "ce_mcp_tool"
    tool_id: Mapped[int] = _id()
    tool_code: Mapped[str] = mapped_column(sa.Text, nullable=False, unique=True)
    tool_group: Mapped[str | None] = mapped_column(sa.Text)
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeMcpDbTool(Base):
    __tablename__ = "ce_mcp_db_tool"
    tool_id: Mapped[int] = mapped_column(
        BIGID, sa.ForeignKey("ce_mcp_tool.tool_id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    dialect: Mapped[str] = mapped_column(sa.Text, nullable=False, default="POSTGRES", server_default="POSTGRES")
    sql_template: Mapped[str] = mapped_column(sa.Text, nullable=False)
    param_schema: Mapped[Any] = mapped_column(JSON, nullable=False, default=dict)
    safe_mode: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=True, server_default=sa.true())
    max_rows: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=200, server_default="200")
    allowed_identifiers: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime | None] = _created()


class CeMcpPlanner(Base):
    __tablename__ = "ce_mcp_planner"
    planner_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    system_prompt: Mapped[str] = mapped_column(sa.Text, nullable=False)
    user_prompt: Mapped[str] = mapped_column(sa.Text, nullable=False)
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeVerbose(Base):
    __tablename__ = "ce_verbose"
    verbose_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    step_match: Mapped[str] = mapped_column(sa.Text, nullable=False, default="EXACT", server_default="EXACT")
    step_value: Mapped[str] = mapped_column(sa.Text, nullable=False)
    determinant: Mapped[str] = mapped_column(sa.Text, nullable=False)
    rule_id: Mapped[int | None] = mapped_column(BIGID)
    tool_code: Mapped[str | None] = mapped_column(sa.Text)
    message: Mapped[str | None] = mapped_column(sa.Text)
    error_message: Mapped[str | None] = mapped_column(sa.Text)
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeStateGraph(Base):
    """Allowed business transitions per intent (``ANY`` applies to every intent)."""

    __tablename__ = "ce_state_graph"
    state_graph_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    from_state: Mapped[str] = mapped_column(sa.Text, nullable=False)
    to_state: Mapped[str] = mapped_column(sa.Text, nullable=False)
    enabled: Mapped[bool] = _enabled()
    description: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeMemory(Base):
    """Conversation-summary settings and prompts per intent/state."""

    __tablename__ = "ce_memory"
    memory_id: Mapped[int] = _id()
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="ANY", server_default="ANY")
    enabled: Mapped[bool] = _enabled()
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    recent_turns: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=3, server_default="3")
    summary_max_chars: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=1200, server_default="1200")
    system_prompt: Mapped[str | None] = mapped_column(sa.Text)
    user_prompt: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeFlow(Base):
    """convengine's own: a conversation flow (a graph of typed nodes), entered for its intent."""

    __tablename__ = "ce_flow"
    flow_code: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    """The intent whose match enters this flow (NULL: reached only as a subflow or the welcome flow)."""
    entry_node: Mapped[str | None] = mapped_column(sa.Text)
    """The node the flow starts at (NULL: its only ``start`` node; a workflow's only trigger or root agent)."""
    kind: Mapped[str] = mapped_column(sa.Text, nullable=False, default="flow", server_default="flow")
    """``flow`` (a conversation flow) or ``workflow`` (a workflow graph, run by the workflow runtime)."""
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeFlowNode(Base):
    """One node of a flow: its type and its JSON configuration."""

    __tablename__ = "ce_flow_node"
    __table_args__ = (sa.UniqueConstraint("flow_code", "node_id"),)
    flow_node_id: Mapped[int] = _id()
    flow_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    node_id: Mapped[str] = mapped_column(sa.Text, nullable=False)
    node_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    config: Mapped[Any] = mapped_column(JSON, nullable=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeFlowEdge(Base):
    """A directed edge between two nodes of a flow, taken on an outcome and/or a condition."""

    __tablename__ = "ce_flow_edge"
    __table_args__ = (sa.Index(None, "flow_code", "from_node"),)
    flow_edge_id: Mapped[int] = _id()
    flow_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    from_node: Mapped[str] = mapped_column(sa.Text, nullable=False)
    to_node: Mapped[str] = mapped_column(sa.Text, nullable=False)
    outcome: Mapped[str | None] = mapped_column(sa.Text)
    """The source node's outcome this edge follows (e.g. ``escalate``, ``not_found``, ``error``); NULL: the default."""
    condition: Mapped[str | None] = mapped_column(sa.Text)
    """A flow expression (decision/router edges); NULL: always true."""
    priority: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


FLOW_MODELS: tuple[type[Base], ...] = (CeFlow, CeFlowNode, CeFlowEdge)



class CeChain(Base):
    """convengine's own: a chain, primitive steps run in order (convengine.chains)."""

    __tablename__ = "ce_chain"
    chain_code: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    every_s: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    """Start a run every this many seconds (the scheduler's inbound trigger); NULL: only callers start runs."""
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


class CeChainStep(Base):
    """One step of a chain: its type, its place in the order and its JSON configuration."""

    __tablename__ = "ce_chain_step"
    __table_args__ = (sa.UniqueConstraint("chain_code", "step_id"),)
    chain_step_id: Mapped[int] = _id()
    chain_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    step_id: Mapped[str] = mapped_column(sa.Text, nullable=False)
    step_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    position: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=100, server_default="100")
    """Steps run by position (then step id); a step's ``next`` or a ``decide`` branch jumps."""
    config: Mapped[Any] = mapped_column(JSON, nullable=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    enabled: Mapped[bool] = _enabled()
    created_at: Mapped[datetime | None] = _created()


CHAIN_MODELS: tuple[type[Base], ...] = (CeChain, CeChainStep)


class CeChainRun(Base):
    """convengine's own: one run of a chain (a thread on the engine's checkpointer, ``chain:<run_id>``)."""

    __tablename__ = "ce_chain_run"
    __table_args__ = (sa.Index(None, "status", "due_at"), sa.Index(None, "chain_code", "created_at"))
    run_id: Mapped[str] = mapped_column(UUID, primary_key=True)
    chain_code: Mapped[str] = mapped_column(sa.Text, nullable=False)
    version_no: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    """The configuration version (ce_config_version) the run is pinned to, from start to end."""
    conversation_id: Mapped[str] = mapped_column(UUID, nullable=False, index=True)
    """The conversation the run's audit trail, stream and ``assistant`` turns belong to."""
    owner_id: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    status: Mapped[str] = mapped_column(sa.Text, nullable=False)
    current_step: Mapped[str | None] = mapped_column(sa.Text)
    trigger: Mapped[str] = mapped_column(sa.Text, nullable=False)
    input_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    output_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text)
    due_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    """When a SCHEDULED run is due."""
    claimed_by: Mapped[str | None] = mapped_column(sa.Text)
    """The worker running the run now (NULL while it is paused or over)."""
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    """When a claim lapses (a worker lost while running a run): another may take it then."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CeChainRunStep(Base):
    """One step a run took, written once (``seq`` is the step's place in the run)."""

    __tablename__ = "ce_chain_run_step"
    __table_args__ = (sa.UniqueConstraint("run_id", "seq"),)
    run_step_id: Mapped[int] = _id()
    run_id: Mapped[str] = mapped_column(UUID, sa.ForeignKey("ce_chain_run.run_id", ondelete="CASCADE"), nullable=False)
    seq: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    step_id: Mapped[str] = mapped_column(sa.Text, nullable=False)
    step_type: Mapped[str] = mapped_column(sa.Text, nullable=False)
    status: Mapped[str] = mapped_column(sa.Text, nullable=False)
    output_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


CHAIN_RUN_MODELS: tuple[type[Base], ...] = (CeChainRun, CeChainRunStep)

class CeLlmUsage(Base):
    """convengine's own: the tokens of one LLM call and their price (for the monthly spend cap)."""

    __tablename__ = "ce_llm_usage"
    __table_args__ = (sa.Index(None, "created_at"),)
    usage_id: Mapped[int] = _id()
    conversation_id: Mapped[str | None] = mapped_column(UUID)
    call_site: Mapped[str] = mapped_column(sa.Text, nullable=False)
    model: Mapped[str | None] = mapped_column(sa.Text)
    input_tokens: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    output_tokens: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    cost: Mapped[float] = mapped_column(sa.Float, nullable=False, default=0.0)
    created_at: Mapped[datetime | None] = _created()


# --- runtime ---------------------------------------------------------------------------


class CeConversation(Base):
    __tablename__ = "ce_conversation"
    __table_args__ = (sa.Index(None, "updated_at"),)
    conversation_id: Mapped[str] = mapped_column(UUID, primary_key=True)
    status: Mapped[str] = mapped_column(sa.Text, nullable=False, default="RUNNING", server_default="RUNNING")
    intent_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="UNKNOWN", server_default="UNKNOWN")
    state_code: Mapped[str] = mapped_column(sa.Text, nullable=False, default="UNKNOWN", server_default="UNKNOWN")
    context_json: Mapped[Any] = mapped_column(JSON, nullable=False, default=dict)
    last_user_text: Mapped[str | None] = mapped_column(sa.Text)
    last_assistant_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    input_params_json: Mapped[Any] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime | None] = _created()
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    owner_id: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    """The HTTP caller that created the conversation (an identity digest); NULL when host code did."""
    user_id: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    """The end user the conversation belongs to (``user_id`` / ``userId``); set once, never changed."""
    lifecycle: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    """READY, IN_PROGRESS, ENDED or INTERRUPTED (beside ConvEngine's ``status``); NULL before migration 0007."""


class CeAudit(Base):
    __tablename__ = "ce_audit"
    __table_args__ = (sa.Index(None, "conversation_id", "created_at"),)
    audit_id: Mapped[int] = _id()
    conversation_id: Mapped[str] = mapped_column(
        UUID, sa.ForeignKey("ce_conversation.conversation_id", ondelete="CASCADE"), nullable=False
    )
    stage: Mapped[str] = mapped_column(sa.Text, nullable=False)
    payload_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime | None] = _created()


class CeAuditTurn(Base):
    """convengine's own: the audit events of one turn in one row (``convengine.audit.packing``).

    ``created_at`` is the first event's time; ``events`` the packed, compressed events. Turns written
    before migration 0011 stay in ``ce_audit``, one row per event; both read as the same events."""

    __tablename__ = "ce_audit_turn"
    __table_args__ = (sa.Index(None, "conversation_id", "audit_turn_id"), {"sqlite_autoincrement": True})
    audit_turn_id: Mapped[int] = _id()
    conversation_id: Mapped[str] = mapped_column(
        UUID, sa.ForeignKey("ce_conversation.conversation_id", ondelete="CASCADE"), nullable=False
    )
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False)
    events: Mapped[bytes] = mapped_column(sa.LargeBinary, nullable=False)


class CeConversationHistory(Base):
    __tablename__ = "ce_conversation_history"
    __table_args__ = (sa.Index(None, "conversation_id", "history_id"),)
    history_id: Mapped[int] = _id()
    conversation_id: Mapped[str] = mapped_column(
        UUID, sa.ForeignKey("ce_conversation.conversation_id", ondelete="CASCADE"), nullable=False
    )
    user_input: Mapped[str] = mapped_column(sa.Text, nullable=False)
    assistant_output: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime | None] = _created()
    modified_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow)
    undone: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False, server_default=sa.false())
    """True while the turn is undone (``Engine.undo``); rows are marked, never deleted."""


class CeConversationStep(Base):
    """convengine's own: one row per completed turn (a conversation step): its input, the actions
    that fired, the data its steps produced, its output and whether it had effects outside the engine."""

    __tablename__ = "ce_conversation_step"
    __table_args__ = (sa.Index(None, "conversation_id", "step_id"), sa.Index(None, "turn_key"),
                      sa.Index(None, "created_at"))
    step_id: Mapped[int] = _id()
    conversation_id: Mapped[str] = mapped_column(
        UUID, sa.ForeignKey("ce_conversation.conversation_id", ondelete="CASCADE"), nullable=False
    )
    turn_key: Mapped[str] = mapped_column(sa.Text, nullable=False)
    """The turn's id (also in its checkpoint's metadata)."""
    turn: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    history_id: Mapped[int | None] = mapped_column(BIGID, nullable=True)
    """The turn's ce_conversation_history row (marked undone with it)."""
    input_text: Mapped[str | None] = mapped_column(sa.Text)
    actions_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    data_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    output_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    side_effects_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    properties_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    """Long-term properties the turn saved: ``{name: {before, after}}`` (undo puts ``before`` back)."""
    undone: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False, server_default=sa.false())
    created_at: Mapped[datetime | None] = _created()
    # What analytics (convengine.analytics) counts, written with the row (migration 0015; NULL before it).
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    """The intent the turn ended in."""
    state_code: Mapped[str | None] = mapped_column(sa.Text)
    """The state the turn ended in."""
    fallback: Mapped[bool | None] = mapped_column(sa.Boolean)
    """A fallback answered the turn (``convengine.catalog.memory.FALLBACK_STAGES``)."""
    handoff: Mapped[bool | None] = mapped_column(sa.Boolean)
    """The turn handed the conversation to a person (``FLOW_HANDOFF``)."""
    llm_calls: Mapped[int | None] = mapped_column(sa.Integer)
    """Model calls the turn made that returned (``LLM_CALL`` events)."""
    input_tokens: Mapped[int | None] = mapped_column(sa.Integer)
    output_tokens: Mapped[int | None] = mapped_column(sa.Integer)
    llm_cost: Mapped[float | None] = mapped_column(sa.Float)
    """The calls' estimated price, from ``llm.spend.prices`` when the turn was recorded."""


STEP_STATS_COLUMNS: tuple[str, ...] = ("intent_code", "state_code", "fallback", "handoff", "llm_calls",
                                       "input_tokens", "output_tokens", "llm_cost")
"""The ce_conversation_step columns migration 0015 added."""


class CeLlmCallLog(Base):
    __tablename__ = "ce_llm_call_log"
    llm_call_id: Mapped[int] = _id()
    conversation_id: Mapped[str | None] = mapped_column(UUID)
    intent_code: Mapped[str | None] = mapped_column(sa.Text)
    state_code: Mapped[str | None] = mapped_column(sa.Text)
    provider: Mapped[str | None] = mapped_column(sa.Text)
    model: Mapped[str | None] = mapped_column(sa.Text)
    temperature: Mapped[Any] = mapped_column(sa.Numeric(3, 2), nullable=True)
    prompt_text: Mapped[str | None] = mapped_column(sa.Text)
    user_context: Mapped[str | None] = mapped_column(sa.Text)
    response_text: Mapped[str | None] = mapped_column(sa.Text)
    success: Mapped[bool | None] = mapped_column(sa.Boolean)
    error_message: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime | None] = _created()


class CeMcpUserFeedback(Base):
    """ConvEngine's feedback table: a thumbs-up/down on an answer, with the turn it was given on."""

    __tablename__ = "ce_mcp_user_feedback"
    __table_args__ = (sa.Index(None, "conversation_id", "created_at"),)
    feedback_id: Mapped[int] = _id()
    conversation_id: Mapped[str] = mapped_column(
        UUID, sa.ForeignKey("ce_conversation.conversation_id", ondelete="CASCADE"), nullable=False
    )
    feedback_type: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    message_id: Mapped[str | None] = mapped_column(sa.String(128))
    intent_code: Mapped[str | None] = mapped_column(sa.String(255))
    state_code: Mapped[str | None] = mapped_column(sa.String(255))
    user_query: Mapped[str | None] = mapped_column(sa.Text)
    assistant_response: Mapped[str | None] = mapped_column(sa.Text)
    mcp_tool_code: Mapped[str | None] = mapped_column(sa.String(255))
    captured_query_knowledge_count: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0,
                                                                server_default="0")
    applied_query_knowledge_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    metadata_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False, default=utcnow,
                                                 server_default=sa.func.now())


class ConfigStamp(Base):
    """convengine's own: one row naming the configuration's last change (pack import or cache
    refresh), so every process can tell cheaply that it must reload."""

    __tablename__ = "convengine_config_stamp"
    stamp_id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    stamp: Mapped[str] = mapped_column(sa.Text, nullable=False)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CeKnowledgeBase(Base):
    """convengine's own: a named collection of documents the engine can answer from."""

    __tablename__ = "ce_knowledge_base"
    kb_name: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    description: Mapped[str | None] = mapped_column(sa.Text)
    revision: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0, server_default="0")
    """Bumped by every ingest or delete, so searchers know when their cached vectors are stale."""
    created_at: Mapped[datetime | None] = _created()
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CeKnowledgeDocument(Base):
    """One ingested source (a file or a text given from Python) of a knowledge base."""

    __tablename__ = "ce_knowledge_document"
    __table_args__ = (sa.UniqueConstraint("kb_name", "source"),)
    document_id: Mapped[int] = _id()
    kb_name: Mapped[str] = mapped_column(
        sa.Text, sa.ForeignKey("ce_knowledge_base.kb_name", ondelete="CASCADE"), nullable=False
    )
    source: Mapped[str] = mapped_column(sa.Text, nullable=False)
    title: Mapped[str | None] = mapped_column(sa.Text)
    content_hash: Mapped[str] = mapped_column(sa.Text, nullable=False)
    chunk_count: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    metadata_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime | None] = _created()
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CeKnowledgeChunk(Base):
    """A passage of a document: what retrieval ranks and answers with. Lexical search uses a
    ``tsvector`` column (PostgreSQL) or an FTS5 table (SQLite) created by the migration."""

    __tablename__ = "ce_knowledge_chunk"
    __table_args__ = (sa.Index(None, "kb_name", "chunk_id"),)
    chunk_id: Mapped[int] = _id()
    document_id: Mapped[int] = mapped_column(
        BIGID, sa.ForeignKey("ce_knowledge_document.document_id", ondelete="CASCADE"), nullable=False, index=True,
    )
    kb_name: Mapped[str] = mapped_column(sa.Text, nullable=False)
    position: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    title: Mapped[str | None] = mapped_column(sa.Text)
    text: Mapped[str] = mapped_column(sa.Text, nullable=False)
    metadata_json: Mapped[Any] = mapped_column(JSON, nullable=True)
    embedding: Mapped[bytes | None] = mapped_column(sa.LargeBinary, nullable=True)
    """float32 values, little-endian; NULL when the base was ingested without an embeddings model."""
    embedding_model: Mapped[str | None] = mapped_column(sa.Text)


KNOWLEDGE_MODELS: tuple[type[Base], ...] = (CeKnowledgeBase, CeKnowledgeDocument, CeKnowledgeChunk)


# --- versioned configuration (convengine.versions) ---------------------------------------------
# convengine's own tables; ConvEngine's ce_* control tables stay as they are and mirror the version
# published on the live channel.


class CeConfigVersion(Base):
    """convengine's own: one immutable version of the configuration (the pack of every control row)."""

    __tablename__ = "ce_config_version"
    version_no: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    content_hash: Mapped[str] = mapped_column(sa.Text, nullable=False, index=True)
    content: Mapped[str] = mapped_column(sa.Text, nullable=False)
    """The version's pack as canonical JSON (sorted keys): what ``content_hash`` is the SHA-256 of."""
    author: Mapped[str] = mapped_column(sa.Text, nullable=False)
    message: Mapped[str | None] = mapped_column(sa.Text)
    parent_no: Mapped[int | None] = mapped_column(sa.Integer)
    """The draft this version was edited from, when it was an edit."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False, default=utcnow)


class CeConfigChannel(Base):
    """convengine's own: a named channel (``production``, ``staging``, the reserved ``draft``) and the
    version it serves."""

    __tablename__ = "ce_config_channel"
    channel_name: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    version_no: Mapped[int] = mapped_column(sa.Integer, sa.ForeignKey("ce_config_version.version_no"),
                                            nullable=False)
    migration: Mapped[str] = mapped_column(sa.Text, nullable=False, default="pin", server_default="pin")
    """``pin``: a conversation stays on the version it started on; ``latest``: it moves at its next turn."""
    gated: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False, server_default=sa.false())
    """Serves only versions that passed the publish gate, like ``production`` always does (migration 0012)."""
    updated_by: Mapped[str | None] = mapped_column(sa.Text)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


class CeConfigPublication(Base):
    """convengine's own: every move of a channel (publish, rollback, import, point), in order."""

    __tablename__ = "ce_config_publication"
    publication_id: Mapped[int] = _id()
    channel_name: Mapped[str] = mapped_column(sa.Text, nullable=False)
    version_no: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    action: Mapped[str] = mapped_column(sa.Text, nullable=False)
    author: Mapped[str] = mapped_column(sa.Text, nullable=False)
    message: Mapped[str | None] = mapped_column(sa.Text)
    tests_run: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, nullable=False, default=utcnow)


class CeConversationVersion(Base):
    """convengine's own: the configuration version a conversation is pinned to."""

    __tablename__ = "ce_conversation_version"
    conversation_id: Mapped[str] = mapped_column(sa.Text, primary_key=True)
    version_no: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    updated_at: Mapped[datetime | None] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


VERSION_MODELS: tuple[type[Base], ...] = (CeConfigVersion, CeConfigChannel, CeConfigPublication,
                                          CeConversationVersion)


CONTROL_MODELS: tuple[type[Base], ...] = (
    CeConfig,
    CeIntent,
    CeIntentClassifier,
    CeOutputSchema,
    CePromptTemplate,
    CeResponse,
    CeRule,
    CePolicy,
    CePendingAction,
    CeContainerConfig,
    CeMcpTool,
    CeMcpDbTool,
    CeMcpPlanner,
    CeVerbose,
    CeStateGraph,
    CeMemory,
    *FLOW_MODELS,
    *CHAIN_MODELS,
)
RUNTIME_MODELS: tuple[type[Base], ...] = (CeConversation, CeAudit, CeConversationHistory, CeLlmCallLog,
                                           CeMcpUserFeedback)
MEMORY_MODELS: tuple[type[Base], ...] = (CeConversationStep,)
AUDIT_TURN_MODELS: tuple[type[Base], ...] = (CeAuditTurn,)

CONTROL_TABLES: tuple[str, ...] = tuple(m.__tablename__ for m in CONTROL_MODELS)
RUNTIME_TABLES: tuple[str, ...] = tuple(m.__tablename__ for m in RUNTIME_MODELS)
MODEL_BY_TABLE: dict[str, type[Base]] = {m.__tablename__: m for m in CONTROL_MODELS + RUNTIME_MODELS}


def primary_key_column(table: str) -> str:
    """The name of a table's (single) primary-key column."""
    return MODEL_BY_TABLE[table].__table__.primary_key.columns.values()[0].name
