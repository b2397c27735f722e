"""EngineSettings: every ``convengine.*`` property of ConvEngine with its default.

Properties are nested snake_case fields (``convengine.flow.dialogue-act.resolute`` is
``settings.flow.dialogue_act.resolute``). Precedence, highest first: keyword arguments,
environment (``CONVENGINE_FLOW__DIALOGUE_ACT__RESOLUTE=REGEX_ONLY``), a pack's ``settings:``
block, the defaults below. ``ce_config`` rows then override per component
(:func:`apply_component_overrides`), on every load and reload.
"""

from __future__ import annotations

import codecs
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from convengine.catalog import ce_config
from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.catalog.errors import ConfigError, ErrorCode
from convengine.catalog.names import PIPELINE_END_GUARD
from convengine.catalog.vocab import KNOWLEDGE_FILTER_KEY
from convengine.security.env_refs import DEFAULT_PACK_ENV_NAMES, resolve_env_refs
from convengine.security.redact import remember_settings_secrets

DEFAULT_MAX_PASSES = 5
DEFAULT_TURN_LOCK_TIMEOUT_S = 30.0
DEFAULT_MAX_MESSAGE_CHARS = 100_000
DEFAULT_LLM_TIMEOUT_S = 60.0
DEFAULT_RECURSION_LIMIT = 200
DEFAULT_CHECKPOINT_PRUNE_EVERY = 25
DEFAULT_MAX_INPUT_DEPTH = 32

DEFAULT_POLICY_MATRIX: dict[str, str] = {
    "PENDING_ACTION:AFFIRM": "EXECUTE_PENDING_ACTION",
    "PENDING_ACTION:NEGATE": "REJECT_PENDING_ACTION",
    "PENDING_SLOT:EDIT": "FILL_PENDING_SLOT",
    "PENDING_SLOT:QUESTION": "FILL_PENDING_SLOT",
    "PENDING_SLOT:NEGATE": "FILL_PENDING_SLOT",
    "PENDING_SLOT:AFFIRM": "FILL_PENDING_SLOT",
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# --- convengine.flow -------------------------------------------------------------------


class QueryRewriteSettings(_Section):
    enabled: bool = True


class ConversationHistorySettings(_Section):
    max_turns: int = Field(20, ge=1, le=500)
    """Turns kept in the checkpointed window and offered to prompts as conversation_history."""


class DialogueActSettings(_Section):
    resolute: Literal["REGEX_ONLY", "REGEX_THEN_LLM", "LLM_ONLY"] = "REGEX_THEN_LLM"
    llm_threshold: float = Field(0.90, ge=0.0, le=1.0)


class InteractionPolicySettings(_Section):
    execute_pending_on_affirm: bool = True
    reject_pending_on_negate: bool = True
    fill_pending_slot_on_non_new_request: bool = True
    require_resolved_intent_and_state: bool = True
    matrix: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_POLICY_MATRIX))


class ActionLifecycleSettings(_Section):
    enabled: bool = True
    ttl_turns: int = 3
    ttl_minutes: int = 30


class ToolOrchestrationSettings(_Section):
    enabled: bool = True
    allow_caller_requests: bool = True
    """Run a caller's ``tool_request`` param (ConvEngine's consumer contract), always limited to the
    enabled ce_mcp_tool rows in scope; false refuses every caller tool request."""


class GuardrailSettings(_Section):
    enabled: bool = True
    sanitize_input: bool = True
    require_approval_for_sensitive_actions: bool = False
    approval_gate_fail_closed: bool = False
    """Also deny when a sensitive-pattern check cannot be evaluated (e.g. it timed out)."""
    sensitive_patterns: list[str] = Field(default_factory=list)


class StateGraphSettings(_Section):
    enabled: bool = True
    soft_block_on_violation: bool = False
    allowed_transitions: dict[str, list[str]] = Field(default_factory=dict)
    """ConvEngine's YAML edges (FROM -> [TO]); merged with ce_state_graph rows for intent ANY."""
    mode: Literal["AUDIT_ONLY", "SOFT_BLOCK", "HARD_BLOCK"] = "AUDIT_ONLY"
    """AUDIT_ONLY records violations; SOFT_BLOCK also sets state_graph_soft_block;
    HARD_BLOCK keeps the turn-start state. soft_block_on_violation=true upgrades AUDIT_ONLY."""


class DisambiguationSettings(_Section):
    enabled: bool = True
    max_options: int = Field(5, ge=1)


class MemorySettings(_Section):
    enabled: bool = True
    summary_max_chars: int = Field(1200, ge=1)
    recent_turns_for_summary: int = Field(3, ge=0)


class FlowSettings(_Section):
    query_rewrite: QueryRewriteSettings = Field(default_factory=QueryRewriteSettings)
    conversation_history: ConversationHistorySettings = Field(default_factory=ConversationHistorySettings)
    dialogue_act: DialogueActSettings = Field(default_factory=DialogueActSettings)
    interaction_policy: InteractionPolicySettings = Field(default_factory=InteractionPolicySettings)
    action_lifecycle: ActionLifecycleSettings = Field(default_factory=ActionLifecycleSettings)
    tool_orchestration: ToolOrchestrationSettings = Field(default_factory=ToolOrchestrationSettings)
    guardrail: GuardrailSettings = Field(default_factory=GuardrailSettings)
    state_graph: StateGraphSettings = Field(default_factory=StateGraphSettings)
    disambiguation: DisambiguationSettings = Field(default_factory=DisambiguationSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)


# --- convengine.audit ------------------------------------------------------------------


class AuditRateLimitSettings(_Section):
    enabled: bool = False
    max_events: int = 200
    window_ms: int = 1000
    per_conversation: bool = True
    per_stage: bool = True
    max_tracked_buckets: int = 20000


class AuditDispatchSettings(_Section):
    async_enabled: bool = False
    worker_threads: int = 2
    queue_capacity: int = 2000
    rejection_policy: Literal["CALLER_RUNS", "DROP_NEWEST", "DROP_OLDEST", "ABORT"] = "CALLER_RUNS"
    keep_alive_seconds: int = 60


class AuditPersistenceSettings(_Section):
    mode: Literal["IMMEDIATE", "DEFERRED_BULK"] = "DEFERRED_BULK"
    """convengine always writes a turn's events in one batch at the end of the turn (and on
    failure) while streaming each event live; both values behave that way."""
    jdbc_batch_size: int = 200
    max_buffered_events: int = 5000
    flush_stages: list[str] = Field(
        default_factory=lambda: ["ENGINE_KNOWN_FAILURE", "ENGINE_UNKNOWN_FAILURE"]
    )
    final_step_names: list[str] = Field(default_factory=lambda: [PIPELINE_END_GUARD])
    flush_on_stop_outcome: bool = True


class AuditSettings(_Section):
    enabled: bool = True
    persist_meta: bool = True
    cache_inspector: bool = False
    level: Literal["ALL", "STANDARD", "ERROR_ONLY", "NONE"] = "ALL"
    include_stages: list[str] = Field(default_factory=list)
    exclude_stages: list[str] = Field(default_factory=list)
    include_intents: list[str] = Field(default_factory=list)
    exclude_intents: list[str] = Field(default_factory=list)
    rate_limit: AuditRateLimitSettings = Field(default_factory=AuditRateLimitSettings)
    dispatch: AuditDispatchSettings = Field(default_factory=AuditDispatchSettings)
    persistence: AuditPersistenceSettings = Field(default_factory=AuditPersistenceSettings)


# --- convengine.transport --------------------------------------------------------------


class SseSettings(_Section):
    enabled: bool = True
    emitter_timeout_ms: int = Field(600_000, ge=1000)
    """How long one stream lives (ConvEngine's default was 30 minutes; clients reconnect)."""


class StompBrokerSettings(_Section):
    mode: Literal["SIMPLE", "RELAY"] = "SIMPLE"
    relay_destination_prefixes: list[str] = Field(default_factory=lambda: ["/topic", "/queue"])
    relay_host: str = "localhost"
    relay_port: int = 61613
    client_login: str = ""
    client_passcode: str = ""
    system_login: str = ""
    system_passcode: str = ""
    virtual_host: str = ""
    system_heartbeat_send_interval_ms: int = 10000
    system_heartbeat_receive_interval_ms: int = 10000


class StompSettings(_Section):
    enabled: bool = False
    endpoint: str = "/ws-convengine"
    app_destination_prefix: str = "/app"
    topic_prefix: str = "/topic"
    audit_destination_base: str = "/topic/convengine/audit"
    allowed_origin_pattern: str = "*"
    sock_js: bool = True
    broker: StompBrokerSettings = Field(default_factory=StompBrokerSettings)


class TransportSettings(_Section):
    sse: SseSettings = Field(default_factory=SseSettings)
    stomp: StompSettings = Field(default_factory=StompSettings)


# --- convengine.mcp --------------------------------------------------------------------

HTTP_MAX_ATTEMPTS = 10
"""Most attempts of one HTTP call (a tool's or a flow's service node: its ``retries`` + 1)."""
HTTP_MAX_TIMEOUT_MS = 120_000
"""Longest connect or read timeout of one HTTP attempt."""
HTTP_MAX_BACKOFF_MS = 60_000


class McpGuardrailSettings(_Section):
    enabled: bool = False
    fail_closed: bool = False
    allowed_next_by_current_tool: dict[str, list[str]] = Field(default_factory=dict)


class HttpApiDefaults(_Section):
    # Bounded: a pack's retries against a host that answers 503 (or never) must not hold a turn for good.
    connect_timeout_ms: int = Field(2000, gt=0, le=HTTP_MAX_TIMEOUT_MS)
    read_timeout_ms: int = Field(5000, gt=0, le=HTTP_MAX_TIMEOUT_MS)
    max_attempts: int = Field(2, ge=1, le=HTTP_MAX_ATTEMPTS)
    initial_backoff_ms: int = Field(200, ge=0, le=HTTP_MAX_BACKOFF_MS)
    max_backoff_ms: int = Field(2000, ge=0, le=HTTP_MAX_BACKOFF_MS)
    backoff_multiplier: float = Field(2.0, ge=1.0, le=10.0)
    circuit_breaker_enabled: bool = True
    circuit_failure_threshold: int = Field(5, ge=1)
    circuit_open_ms: int = 30000
    retry_status_codes: list[int] = Field(default_factory=lambda: [429, 502, 503, 504])
    retry_on_io_exception: bool = True


class HttpApiSettings(_Section):
    defaults: HttpApiDefaults = Field(default_factory=HttpApiDefaults)
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts or CIDR ranges that may be private/loopback/link-local (refused otherwise)."""


class DbQuerySettings(_Section):
    mode: str = "semantic"


class DbSemanticSettings(_Section):
    enabled: bool = False
    tool_code: str = "db.semantic.query"
    default_limit: int = 100
    max_limit: int = 500
    sql_dialect: str = "postgres"
    timezone: str = "system"
    max_join_hops: int = 6
    max_tables: int = 10


class DbPreflightSettings(_Section):
    enabled: bool = True
    strict_schema: bool = True
    coerce_numeric: bool = True
    value_mappings: dict[str, Any] = Field(default_factory=dict)
    sql_auto_repair_enabled: bool = True
    sql_auto_repair_max_retries: int = 3


class DbSettings(_Section):
    query: DbQuerySettings = Field(default_factory=DbQuerySettings)
    sql_guardrail_table: str = ""
    introspect_tables: list[str] = Field(default_factory=list)
    semantic: DbSemanticSettings = Field(default_factory=DbSemanticSettings)
    preflight: DbPreflightSettings = Field(default_factory=DbPreflightSettings)
    statement_timeout_ms: int = Field(5000, ge=1)
    databases: dict[str, str] = Field(default_factory=dict)
    """Named databases (name -> URL) that DB tools may run on; ``default`` is the engine's own."""
    tool_databases: dict[str, str] = Field(default_factory=dict)
    """tool_code -> database name (from ``databases``); tools not listed use the engine's database."""
    blocked_keywords: list[str] = Field(default_factory=list)
    blocked_functions: list[str] = Field(default_factory=list)
    allowed_functions: list[str] = Field(default_factory=list)
    raw_sql_enabled: bool = False
    """Let the raw-SQL tools (postgres.query, db.query, sql.query) run at all; each still needs an
    enabled ce_mcp_tool row in scope, and a database from ``tool_databases``."""
    raw_sql_on_engine_database: bool = False
    """Allow raw-SQL tools on the engine's own database (it holds every conversation)."""


class McpServerSettings(_Section):
    transport: Literal["stdio", "streamable_http"] = "stdio"
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 30.0
    intent_code: str = "ANY"
    state_code: str = "ANY"


class McpSettings(_Section):
    tool_max_loops: int = Field(5, ge=1)
    max_result_rows: int = Field(200, ge=1)
    """Rows a DB tool returns at most."""
    max_result_bytes: int = Field(262_144, ge=1024)
    """Bytes (as JSON) any tool result may take; larger results fail the call with TOOL_RESULT_TOO_LARGE."""
    tool_call_delay_ms: int = 0
    tool_call_delay_after_calls: int = 4
    tool_call_delay_after_ms: int = 2000
    planner_max_observation_chars: int = Field(6000, ge=1000)
    planner_max_observations: int = Field(2, ge=1)
    guardrail: McpGuardrailSettings = Field(default_factory=McpGuardrailSettings)
    http_api: HttpApiSettings = Field(default_factory=HttpApiSettings)
    db: DbSettings = Field(default_factory=DbSettings)
    servers: dict[str, McpServerSettings] = Field(default_factory=dict)
    """Real MCP servers; their tools are addressed as ``mcp.<server>.<tool>``."""


# --- convengine.knowledge (convengine's own) ---------------------------------------------


class KnowledgeFallbackSettings(_Section):
    enabled: bool = False
    """Answer from knowledge bases when no intent matches (before the fallback response)."""
    knowledge_bases: list[str] = Field(default_factory=list)
    """Bases to search; empty means every base in the database."""
    min_score: float = Field(0.5, ge=0.0, le=1.0)
    """``knowledge_fallback_min_score``: the best passage must score at least this to answer."""
    top_k: int = Field(3, ge=1, le=20)
    """Passages kept as sources (and given to synthesis)."""
    synthesis: bool = False
    """Write the answer from the passages with the KNOWLEDGE_SYNTHESIS call site (needs an LLM);
    otherwise the best passage is the answer."""
    query_turns: int = Field(0, ge=0, le=10)
    """Conversation-aware search for follow-ups ("and how long does that take?"): when the message
    alone finds nothing at ``min_score``, search again with this many earlier user messages before
    it. 0: the message alone (or the dialogue-act LLM's standalone query, when it wrote one)."""
    filters: dict[str, str | int | float | bool | list[str | int | float | bool]] = Field(default_factory=dict)
    """Document metadata the passages must have (``{lang: en, product: [loans, cards]}``: every key, a list
    for any of its values); empty: no filter."""

    @field_validator("filters")
    @classmethod
    def _filter_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, wanted in value.items():
            if not re.match(KNOWLEDGE_FILTER_KEY, key):
                raise ValueError(f"filter key {key[:40]!r} must be 1-64 letters, digits, '_', '.' or '-'")
            if wanted == [] or any(isinstance(v, str) and "\x00" in v
                                   for v in (wanted if isinstance(wanted, list) else [wanted])):
                raise ValueError(f"filter {key!r} needs at least one value, and no NUL character in one")
        return value


class ConversationMemorySettings(_Section):
    """Users, undo/redo and the conversation lifecycle (see docs/memory.md)."""

    undo_depth: int = Field(5, ge=0, le=100)
    """How many turns in a row ``Engine.undo`` may take back; 0 turns undo off."""
    undo_past_side_effects: bool = True
    """False: a turn that ran a task or a tool (effects outside the engine) cannot be undone."""
    end_states: list[str] = Field(default_factory=list)
    """States that end the conversation (lifecycle ENDED): a later message is refused unless it resets."""
    long_term: list[str] = Field(default_factory=list)
    """Context properties kept per user across conversations (LangGraph's store): loaded when a user's
    conversation starts, saved when a turn that set them commits (in the context, or as a param by a
    rule or a task)."""
    long_term_from_caller: list[str] = Field(default_factory=list)
    """Long-term properties a caller's ``inputParams`` may set for its user (each one must be in
    ``long_term``); any other long-term name a caller sends stays in the conversation and is not saved."""
    secret: list[str] = Field(default_factory=list)
    """Context/param properties usable during the turn only: never checkpointed, stored, audited or
    logged; every occurrence of their values is masked as ``***``."""

    @model_validator(mode="after")
    def _caller_names_are_long_term(self) -> ConversationMemorySettings:
        undeclared = [name for name in self.long_term_from_caller if name not in self.long_term]
        if undeclared:
            raise ValueError(f"long_term_from_caller names {', '.join(undeclared)}, not in long_term "
                             f"({', '.join(self.long_term) or 'empty'})")
        return self


class KnowledgeIngestSettings(_Section):
    """What one ingested file may cost (the folder may be writable by others; see docs/knowledge.md)."""

    max_file_bytes: int = Field(20_000_000, ge=1)
    """A larger file is refused (its bytes are never read past this)."""
    max_text_chars: int = Field(5_000_000, ge=1)
    """Text extracted from one file (PDF, HTML, Markdown...) may not pass this."""
    max_seconds: float = Field(60.0, gt=0)
    """Longest reading one file may take; a slower one is refused."""
    max_pdf_pages: int = Field(5_000, ge=1)
    max_pdf_content_bytes: int = Field(10_000_000, ge=1)
    """Decompressed page content a PDF may hold, counted once per page that draws it (the work of
    extracting its text); checked before any text is extracted."""
    max_pdf_memory_mb: int = Field(1024, ge=64)
    """Memory the process reading one PDF may take (on systems that can limit it)."""
    chunk_size: int = Field(800, ge=50, le=100_000)
    """Longest passage, in characters: text is cut at paragraph, sentence or word boundaries to fit."""
    chunk_overlap: int = Field(100, ge=0, le=50_000)
    """Characters a passage repeats from the one before (at most half of ``chunk_size``)."""
    encodings: list[str] = Field(default_factory=lambda: ["utf-8", "cp1252", "latin-1"], min_length=1)
    """Encodings tried in order for text, Markdown and HTML files (a byte-order mark wins first); the
    first that decodes every byte is used, Latin-1 last of all (it decodes anything)."""

    @field_validator("encodings")
    @classmethod
    def _known_encodings(cls, value: list[str]) -> list[str]:
        for name in value:
            try:
                codecs.lookup(name)
            except LookupError:
                raise ValueError(f"unknown encoding {name!r}") from None
        return value


class KnowledgeSettings(_Section):
    lexical_weight: float = Field(0.5, ge=0.0)
    vector_weight: float = Field(0.5, ge=0.0)
    candidates: int = Field(50, ge=1, le=1000)
    """Candidates taken from each leg (full-text and vector) before fusion."""
    fusion: Literal["weighted", "rrf"] = "weighted"
    """How passages are ordered: by the weighted score, or by reciprocal-rank fusion of the two legs'
    ranks (``score`` keeps its absolute meaning either way, so thresholds do not change)."""
    rrf_k: int = Field(60, ge=1, le=10_000)
    """The constant of reciprocal-rank fusion: ``1 / (rrf_k + rank)`` per leg."""
    vector_index: Literal["auto", "sqlite-vec", "brute-force"] = "auto"
    """Where the vector leg searches: ``sqlite-vec`` (vec0 tables in the SQLite file, needs
    ``convengine[vector]``), ``brute-force`` (every vector in each process's memory), or ``auto``
    (sqlite-vec when available, else brute force; ``convengine knowledge list`` says which and why)."""
    semantic_threshold: float = Field(0.75, ge=0.0, le=1.0)
    """Default similarity a SEMANTIC intent classifier needs (a row may set its own)."""
    fallback: KnowledgeFallbackSettings = Field(default_factory=KnowledgeFallbackSettings)
    ingest: KnowledgeIngestSettings = Field(default_factory=KnowledgeIngestSettings)


class FlowsSettings(_Section):
    """Conversation flows (convengine.flows)."""

    max_steps_per_turn: int = Field(64, ge=1, le=10_000)
    """Node steps one turn may take before it is stopped (an audited error; nothing kept)."""
    python_timeout_s: float = Field(2.0, gt=0, le=60)
    """Wall-clock limit of a python node's script."""
    python_memory_mb: int = Field(256, ge=32, le=8192)
    """Address-space limit of a python node's process."""
    python_max_output_chars: int = Field(20_000, ge=100)
    """print() output kept from a script (for the trace)."""
    python_sandbox: Literal["strict", "weak"] = "strict"
    """``strict``: a pack with python nodes is refused at load where the host cannot set up their
    operating-system sandbox (bubblewrap namespaces and seccomp); ``weak`` runs them anyway with
    what the host has (a separate process, resource limits, an audit hook, seccomp when present)."""
    workspace: dict[str, Any] = Field(default_factory=dict)
    """Pack-level values: python nodes read them as ``workspace`` (read-only), templates and
    expressions as ``workspace.<name>``."""
    welcome_flow: str | None = None
    """The flow a conversation started with ``Engine.start`` (the welcome event) runs."""
    root_workflow: str | None = None
    """A workflow (``ce_flow`` of kind ``workflow``) that answers every message no flow or intent-mapped
    workflow takes: the assistant is that workflow graph (see docs/workflows.md)."""
    small_talk_intents: list[str] = Field(default_factory=list)
    """Intents that are small-talk topics: their classifiers are scored before every other intent's."""
    small_talk_min_score: float = Field(0.5, ge=0.0, le=1.0)
    """Share of the message a small-talk match must cover to win outright (below: only when no
    other intent's classifier matches)."""


class ChainsSettings(_Section):
    """Chain runs (convengine.chains): the scheduler that resumes due ``schedule`` steps."""

    scheduler: bool = True
    """A server (``convengine serve``) polls for due runs; off, run ``convengine chains run-due`` instead."""
    poll_interval_s: float = Field(2.0, gt=0, le=3600)
    """How often a server's scheduler looks for due runs."""
    claim_ttl_s: float = Field(300.0, gt=0, le=86_400)
    """How long a worker holds a run it is running; a run whose worker was lost is taken again after it."""
    batch: int = Field(20, ge=1, le=1000)
    """Runs one poll takes at most."""
    max_answer_bytes: int = Field(65_536, ge=16)
    """The largest answer (as JSON) a person may resume a ``human`` step with."""


# --- convengine.llm and engine-level ---------------------------------------------------


class LlmPrice(_Section):
    input_per_million: float = Field(0.0, ge=0)
    output_per_million: float = Field(0.0, ge=0)


class LlmSpendSettings(_Section):
    """Token usage is recorded per call (``ce_llm_usage``) and priced here; at ``monthly_cap`` (in the
    prices' currency, per calendar month UTC) the LLM intent matcher, knowledge synthesis and entity
    nodes' LLM extraction are skipped."""

    monthly_cap: float | None = Field(None, ge=0)
    prices: dict[str, LlmPrice] = Field(default_factory=dict)
    """Model name (or ``default``) -> price per million input and output tokens."""


class LlmSettings(_Section):
    provider: str = "openai"
    model: str = "gpt-4o-mini"
    temperature: float = 0.0
    base_url: str | None = None
    timeout_s: float = Field(DEFAULT_LLM_TIMEOUT_S, gt=0)
    max_retries: int = Field(1, ge=0)
    structured_output: Literal["auto", "json_schema", "json_mode", "function_calling"] = "auto"
    log_calls: bool = False
    """Also write every call to ce_llm_call_log."""
    spend: LlmSpendSettings = Field(default_factory=LlmSpendSettings)


class AuthSettings(_Section):
    mode: Literal["auto", "on", "off"] = "auto"
    """auto: on when keys are configured or the server listens beyond loopback; off only on loopback."""
    api_keys: list[str] = Field(default_factory=list)
    """Keys for the conversation endpoints (``Authorization: Bearer <key>`` or ``X-API-Key``)."""
    admin_keys: list[str] = Field(default_factory=list)
    """Keys that may also use the admin endpoints (cache refresh/analyze) and read any conversation."""
    chain_keys: list[str] = Field(default_factory=list)
    """Keys of people who operate chains: they may list every chain run, read it and resume a run waiting
    at a ``human`` step (the ``chains`` scope), without the admin endpoints."""
    tenants: dict[str, list[str]] = Field(default_factory=dict)
    """Tenant name -> its keys (user keys, valid without being listed in ``api_keys``): the keys of a
    tenant share its conversations and users; a key in no tenant is a tenant of its own."""
    keys_file: str | None = None
    """A YAML or JSON file holding ``api_keys``, ``admin_keys`` and ``tenants`` besides the ones above,
    re-read by every worker within a second of a change: a key removed from it is refused without a
    restart."""
    conversation_ownership: bool = True
    """With authentication on, a conversation belongs to the caller (key or tenant) that created it,
    others get 404, and the users it names are its own; off, every key acts for the host application."""


class CorsSettings(_Section):
    allowed_origins: list[str] = Field(default_factory=list)
    """Origins allowed to call the API from a browser (none by default)."""


class StreamLimits(_Section):
    max_total: int = Field(256, ge=1)
    max_per_caller: int = Field(16, ge=1)
    max_per_conversation: int = Field(4, ge=1)
    idle_timeout_s: float = Field(60.0, gt=0)
    """A stream of a conversation that has not started is closed when no turn arrives in this time."""


class ReadinessSettings(_Section):
    timeout_s: float = Field(2.0, gt=0, le=30)
    """``GET /ready`` answers 503 when the database has not answered its probe within this time."""
    cache_s: float = Field(1.0, ge=0, le=60)
    """A probe's answer is reused for this long, so polling ``/ready`` cannot load the database."""


MAX_CONNECTIONS_PER_CLIENT = 1024
"""Default of ``api.max_connections_per_client``: above what one load balancer or load generator opens to a
worker for 1,000 concurrent conversations (128 reset the connections of such a single-address client)."""


class ApiSettings(_Section):
    max_message_chars: int = Field(DEFAULT_MAX_MESSAGE_CHARS, ge=1)
    max_body_bytes: int = Field(2_000_000, ge=1024)
    max_input_depth: int = Field(DEFAULT_MAX_INPUT_DEPTH, ge=1, le=500)
    """How deeply inputParams (and context) may nest."""
    max_persisted_params_bytes: int = Field(2_000_000, ge=1024)
    """A conversation's persisted params (as JSON) may not grow past this; the turn that would
    pass it is refused with INVALID_INPUT and nothing of it is written."""
    auth: AuthSettings = Field(default_factory=AuthSettings)
    cors: CorsSettings = Field(default_factory=CorsSettings)
    trusted_hosts: list[str] = Field(default_factory=list)
    """Host headers the server answers; empty: loopback names when serving on loopback, any otherwise."""
    streams: StreamLimits = Field(default_factory=StreamLimits)
    readiness: ReadinessSettings = Field(default_factory=ReadinessSettings)
    max_concurrency: int = Field(2048, ge=1)
    """Requests the HTTP server serves at once, per process (more get a bare 503). Only requests whose head
    has fully arrived count: connections still sending theirs (or idle) take no slot. Above
    ``admission.max_turns + admission.queue_length``, so a turn past the admission queue gets its
    ``SERVER_BUSY`` answer with ``Retry-After`` rather than this one."""
    max_connections_per_client: int = Field(MAX_CONNECTIONS_PER_CLIENT, ge=0)
    """Open connections one client address may hold; more are closed at once (0: no cap). Behind a
    reverse proxy every caller has the proxy's address: raise it above the proxy's connection pool or set 0."""
    max_header_bytes: int = Field(16_384, ge=1024)
    header_timeout_s: float = Field(10.0, gt=0)
    """A connection must send a complete request head within this time (slow-header connections are dropped)."""
    body_timeout_s: float = Field(30.0, gt=0)
    """A request body must arrive within this time after its head (slow-body connections are dropped)."""


class PoolSettings(_Section):
    """The pool of database connections turns run on (one per process). A turn holds one connection
    from its lock to its commit and never asks for a second one."""

    size: int | None = Field(None, ge=1)
    """Connections kept open; None: 20 on PostgreSQL, 5 on SQLite."""
    max_overflow: int | None = Field(None, ge=0)
    """Connections opened beyond ``size`` under load (closed when idle); None: 80 on PostgreSQL, 10 on SQLite."""
    timeout_s: float = Field(30.0, gt=0)
    """Longest a statement waits for a free connection before failing with DATABASE_UNAVAILABLE."""


class AdmissionSettings(_Section):
    """How many turns a process runs at once, and the queue of the ones that wait (per process)."""

    max_turns: int | None = Field(None, ge=1)
    """Turns (and undo/redo) running at once; None: the pool's connections (``size + max_overflow``)
    less a tenth, kept for reads outside turns (audit, history, pins): 90 on PostgreSQL, 13 on SQLite."""
    max_working_turns: int | None = Field(None, ge=1)
    """Of the turns running, how many do work at once (run their steps); the others wait in order,
    holding their place. A turn waiting on a model, a tool or a sandboxed python node lends its place
    meanwhile, so this bounds the CPU-bound part of turns, not the turns waiting on a model.
    None: 4 per CPU."""
    queue_length: int = Field(1000, ge=0)
    """Turns that may wait for a free slot; one more is refused at once (SERVER_BUSY, HTTP 503)."""
    queue_timeout_s: float = Field(300.0, gt=0)
    """Longest a turn waits in the queue before it is refused (SERVER_BUSY, HTTP 503)."""
    retry_after_s: int = Field(2, ge=1)
    """The ``Retry-After`` a refused request is told (seconds)."""


class SecuritySettings(_Section):
    pack_env_names: list[str] = Field(default_factory=lambda: list(DEFAULT_PACK_ENV_NAMES))
    """The environment variables a pack may reference as ``${env:NAME}`` (names or glob patterns);
    operator-only. The server's own variables (``CONVENGINE_*``, ``DATABASE_URL``, ``OPENAI_*``) match
    no pattern, only their exact name."""


class ReplayGateSettings(_Section):
    max_changed: int | None = Field(None, ge=0)
    """Publishing replays the last ``last`` recorded conversations against the version and refuses it
    (REPLAY_CHANGED) when more than this many changed, unless the changes are accepted; None: no replay."""
    last: int = Field(200, ge=1, le=1000)


class VersionsSettings(_Section):
    replay_gate: ReplayGateSettings = Field(default_factory=ReplayGateSettings)


class EngineSettings(BaseSettings):
    """Every ``convengine.*`` property, nested; see the module docstring for precedence."""

    model_config = SettingsConfigDict(
        env_prefix="CONVENGINE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    database_url: str = DEFAULT_DATABASE_URL
    flow: FlowSettings = Field(default_factory=FlowSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    transport: TransportSettings = Field(default_factory=TransportSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    knowledge: KnowledgeSettings = Field(default_factory=KnowledgeSettings)
    flows: FlowsSettings = Field(default_factory=FlowsSettings)
    chains: ChainsSettings = Field(default_factory=ChainsSettings)
    versions: VersionsSettings = Field(default_factory=VersionsSettings)
    conversation_memory: ConversationMemorySettings = Field(default_factory=ConversationMemorySettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    """Operator-only: see ``OPERATOR_ONLY_SETTINGS``."""
    tables: dict[str, str] = Field(default_factory=dict)
    """ConvEngine's table-name remap; only the default names are supported (see docs/decisions.md)."""
    schema_active: str | None = Field(None, alias="schema")
    experimental: dict[str, Any] = Field(default_factory=lambda: {"enabled": False})
    turn_lock_timeout_s: float = Field(DEFAULT_TURN_LOCK_TIMEOUT_S, ge=0)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    max_rule_passes: int = Field(DEFAULT_MAX_PASSES, ge=1)
    recursion_limit: int = Field(DEFAULT_RECURSION_LIMIT, ge=30)
    regex_timeout_ms: int = Field(100, ge=1)
    template_timeout_ms: int = Field(1000, ge=1)
    """Longest a template may take to render (responses, prompts, HTTP tool requests)."""
    template_max_output_chars: int = Field(200_000, ge=1)
    template_strict: bool = True
    """Texts shown to the user (EXACT responses...) fail with UNRESOLVED_PROMPT_VARIABLE naming the row
    when they show an undefined or null variable; false renders them empty, as ConvEngine does."""
    auto_migrate: bool = True
    checkpoint_prune_every: int = Field(DEFAULT_CHECKPOINT_PRUNE_EVERY, ge=0)
    """Every N completed turns, drop a conversation's older checkpoints (keep the latest); 0 keeps
    them all (for time travel in Studio). History and audit live in ce_* tables either way."""

    @classmethod
    def build(cls, *, pack_settings: Mapping[str, Any] | None = None, **overrides: object) -> EngineSettings:
        """Settings from keyword args > environment > pack ``settings:`` > defaults.

        Raises:
            ConfigError: a value has the wrong type, an unknown key was given or a ``${env:NAME}``
                reference names an unset variable (see :mod:`convengine.security.env_refs`).
        """
        return cls.build_tolerant(pack_settings=pack_settings, **overrides)[0]

    @classmethod
    def build_tolerant(cls, *, pack_settings: Mapping[str, Any] | None = None,
                       **overrides: object) -> tuple[EngineSettings, list[str]]:
        """:meth:`build`, reading a pack's ``settings:`` the way ConvEngine reads its application.yml:
        keys convengine does not know (``llm.openai.*``, ``demo.*``...) are left out and returned as
        warnings, with the settings that are accepted but do nothing; keyword arguments stay strict.

        Raises:
            ConfigError: as :meth:`build` (a known key with a wrong value is still an error).
        """
        pack, warnings = compat_pack_settings(cls, pack_settings or {})
        if taken := [".".join(path) for path in OPERATOR_ONLY_SETTINGS if _given(pack, path)]:
            raise ConfigError(f"settings.{', settings.'.join(taken)} cannot come from a pack (its settings: or "
                              "ce_config rows): who may call the server and which of its environment variables packs may "
                              "read are the operator's to say, in the server's environment, its keyword settings or "
                              "api.auth.keys_file", code=ErrorCode.SETTINGS_INVALID)
        try:
            from_env = cls().model_dump(exclude_unset=True, by_alias=True)
            operator = deep_merge(from_env, normalise_keys(cls, overrides))
            allowed = SecuritySettings.model_validate(operator.get("security") or {}).pack_env_names
            # the pack's references name only allowed variables; the operator's own may name any
            merged = deep_merge(resolve_env_refs(pack, allowed=allowed), resolve_env_refs(operator))
            settings = cls(**merged)
        except ValidationError as exc:
            raise ConfigError(_describe(exc), code=ErrorCode.SETTINGS_INVALID) from None
        remember_settings_secrets(settings.model_dump())
        return settings, warnings


# Settings a pack may not set: with them a pack author would add its own admin key, turn ownership or
# authentication off, open the server to other origins and host names, or read the server's secrets.
OPERATOR_ONLY_SETTINGS: tuple[tuple[str, ...], ...] = (("api", "auth"), ("api", "cors"), ("api", "trusted_hosts"),
                                                       ("security",))

# Settings convengine accepts (so ConvEngine configurations load) but does not act on.
INERT_SETTINGS: dict[tuple[str, ...], str] = {
    ("schema_active",): "only ConvEngine's inspection endpoints used it",
    ("experimental",): "ConvEngine's experimental SQL-generation endpoints are not offered",
    ("transport", "stomp"): "STOMP/WebSocket is not offered (SSE is)",
    ("mcp", "db", "semantic"): "ConvEngine's semantic text-to-SQL pipeline is not implemented",
    ("mcp", "db", "query"): "ConvEngine's semantic text-to-SQL pipeline is not implemented",
    ("mcp", "db", "preflight"): "ConvEngine's semantic text-to-SQL pipeline is not implemented",
    ("mcp", "db", "sql_guardrail_table"): "tool SQL is checked by PostgreSQL's parser instead",
    ("mcp", "db", "introspect_tables"): "ConvEngine's schema introspection is not implemented",
    ("audit", "dispatch"): "audit events are written in one batch per turn",
    ("audit", "cache_inspector"): "ConvEngine's cache inspector is not implemented",
}
# Where ConvEngine's README puts a key that ConvEngine (and convengine) read elsewhere.
_READ_ELSEWHERE = {
    "interaction_policy", "action_lifecycle", "disambiguation", "guardrail", "state_graph",
    "tool_orchestration", "memory", "query_rewrite", "conversation_history", "dialogue_act",
}


def compat_pack_settings(model: type[BaseModel], data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A pack's settings without the keys convengine does not know, and a warning for each of them
    and for each accepted setting that does nothing."""
    normalised = normalise_keys(model, data)
    schema = normalised.get("schema")
    if isinstance(schema, Mapping):  # ConvEngine writes convengine.nodes.slot_schema.active
        normalised["schema"] = schema.get("active")
    kept, unknown = _split_unknown(model, normalised, ())
    warnings = [_unknown_warning(path) for path in unknown]
    warnings += [f"settings.{'.'.join(path)} is accepted but does nothing: {why}"
                 for path, why in INERT_SETTINGS.items() if _given(kept, path)]
    return kept, warnings


def _given(data: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping):
            return False
        node = node.get("schema" if part == "schema_active" else part)
        if node is None:
            return False
    return True


def _unknown_warning(path: tuple[str, ...]) -> str:
    dotted = ".".join(path)
    if len(path) == 1 and path[0] in _READ_ELSEWHERE or path == ("flow", "llm_threshold"):
        where = "flow.dialogue-act.llm-threshold" if path == ("flow", "llm_threshold") else f"flow.{dotted}"
        return f"settings.{dotted} is not read here (nor by ConvEngine): the setting is {where}; ignored"
    return f"settings.{dotted} is not a convengine setting; ignored"


def _split_unknown(model: type[BaseModel], data: Mapping[str, Any],
                   path: tuple[str, ...]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    kept: dict[str, Any] = {}
    unknown: list[tuple[str, ...]] = []
    for key, value in data.items():
        if key not in known:
            unknown.append((*path, key))
            continue
        sub, each = _submodel(model, key), _mapped_submodel(model, key)
        if sub is not None and isinstance(value, Mapping):
            value, inner = _split_unknown(sub, value, (*path, key))
            unknown += inner
        elif each is not None and isinstance(value, Mapping):
            split = {k: _split_unknown(each, v, (*path, key, k)) if isinstance(v, Mapping) else (v, [])
                     for k, v in value.items()}
            value = {k: v for k, (v, _) in split.items()}
            unknown += [p for _, inner in split.values() for p in inner]
        kept[key] = value
    return kept, unknown


def _describe(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return "invalid settings: " + "; ".join(parts)


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``top`` over ``base``; nested mappings merge, everything else is replaced."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def normalise_keys(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """Accept ConvEngine's kebab-case keys, a ``convengine:`` wrapper and dotted keys.

    Only keys that name fields are rewritten; free-form maps (``allowed_transitions``,
    ``matrix``...) keep their keys as written.
    """
    if set(data) == {"convengine"} and isinstance(data["convengine"], Mapping):
        data = data["convengine"]
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key, rest = _split_dotted(str(raw_key))
        if rest:
            value = {rest: value}
        name = _field_name(model, key)
        sub = _submodel(model, name)
        if sub is not None and isinstance(value, Mapping):
            value = normalise_keys(sub, value)
        elif (each := _mapped_submodel(model, name)) is not None and isinstance(value, Mapping):
            value = {k: normalise_keys(each, v) if isinstance(v, Mapping) else v for k, v in value.items()}
        if isinstance(out.get(name), dict) and isinstance(value, dict):
            out[name] = deep_merge(out[name], value)
        else:
            out[name] = value
    return out


def _split_dotted(key: str) -> tuple[str, str]:
    head, _, rest = key.partition(".")
    return head, rest


def _field_name(model: type[BaseModel], key: str) -> str:
    snake = key.replace("-", "_")
    if snake in model.model_fields:
        return snake
    for info in model.model_fields.values():
        if info.alias == key:
            return info.alias
    return snake


def _mapped_submodel(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """X for a ``dict[str, X]`` field whose values are settings sections (e.g. ``mcp.servers``)."""
    info = model.model_fields.get(name)
    if info is None or typing.get_origin(info.annotation) is not dict:
        return None
    args = typing.get_args(info.annotation)
    value = args[1] if len(args) == 2 else None
    return value if isinstance(value, type) and issubclass(value, BaseModel) else None


def _submodel(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    info = model.model_fields.get(name)
    if info is None:
        return None
    ann = info.annotation
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return None


# ce_config (config_type, config_key) -> settings path, applied on every snapshot load (the ce_config table's
# keys backed by a setting).
COMPONENT_OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = ce_config.SETTING_OVERRIDES


def apply_component_overrides(
    settings: EngineSettings, values: Mapping[tuple[str, str], str]
) -> tuple[EngineSettings, list[tuple[tuple[str, str], str]]]:
    """Return settings with ``ce_config`` overrides applied, plus the keys that were invalid.

    ``values`` maps upper-cased ``(config_type, config_key)`` to the row's text value.
    """
    data = settings.model_dump(by_alias=True)
    bad: list[tuple[tuple[str, str], str]] = []
    for key, path in COMPONENT_OVERRIDES.items():
        if key not in values:
            continue
        node = data
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = values[key]
    try:
        return EngineSettings.model_validate(data), bad
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            for key, path in COMPONENT_OVERRIDES.items():
                if path == loc:
                    bad.append((key, err["msg"]))
        return settings, bad
