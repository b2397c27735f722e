"""Input-param keys the engine gives a meaning to: what a caller may send for one turn, and what only the
engine computes. ``convengine.catalog.state`` builds its turn-only key sets from these; steps read and write
params through these names, never bare strings.
"""

from __future__ import annotations

# --- sent by a caller for the turn they come with (never persisted) ------------------------
RESET = "reset"
RESTART = "restart"
CONVERSATION_RESET = "conversation_reset"
TOOL_REQUEST = "tool_request"
PENDING_ACTION_KEY = "pending_action_key"
PENDING_ACTION_TASK = "pending_action_task"
APPROVAL_GRANTED = "approval_granted"
APPROVAL_GRANTED_CAMEL = "approvalGranted"
FORCE_INTENT_RESOLUTION = "force_intent_resolution"
RESOLVE_INTENT = "resolve_intent"
SWITCH_INTENT = "switch_intent"
SWITCH_FLOW = "switch_flow"
SWITCH_MODE = "switch_mode"

# --- computed by the engine (dropped when a caller sends them, never persisted) ------------

# dialogue act
DIALOGUE_ACT = "dialogue_act"
DIALOGUE_ACT_CONFIDENCE = "dialogue_act_confidence"
DIALOGUE_ACT_SOURCE = "dialogue_act_source"
DIALOGUE_ACT_REGEX = "dialogue_act_regex"
DIALOGUE_ACT_REGEX_CONFIDENCE = "dialogue_act_regex_confidence"
DIALOGUE_ACT_LLM_CANDIDATE = "dialogue_act_llm_candidate"
DIALOGUE_ACT_LLM_CONFIDENCE = "dialogue_act_llm_confidence"
DIALOGUE_ACT_LLM_STANDALONE_QUERY = "dialogue_act_llm_standalone_query"
DIALOGUE_ACT_GUARD_APPLIED = "dialogue_act_guard_applied"
DIALOGUE_ACT_GUARD_REASON = "dialogue_act_guard_reason"
STANDALONE_QUERY = "standalone_query"
RESOLVED_USER_INPUT = "resolved_user_input"

# policy, correction, guardrail, disambiguation
POLICY_DECISION = "policy_decision"
SKIP_INTENT_RESOLUTION = "skip_intent_resolution"
ROUTING_DECISION = "routing_decision"
SKIP_SCHEMA_EXTRACTION = "skip_schema_extraction"
CORRECTION_APPLIED = "correction_applied"
CORRECTION_TARGET_FIELD = "correction_target_field"
GUARDRAIL_BLOCKED = "guardrail_blocked"
GUARDRAIL_REASON = "guardrail_reason"
SANITIZED_USER_TEXT = "sanitized_user_text"
SKIP_TOOL_EXECUTION = "skip_tool_execution"
SKIP_PENDING_ACTION_EXECUTION = "skip_pending_action_execution"
PENDING_ACTION_DISAMBIGUATION_REQUIRED = "pending_action_disambiguation_required"
PENDING_ACTION_RUNTIME_STATUS = "pending_action_runtime_status"
PENDING_ACTION_RESULT = "pending_action_result"

# schema facts
MISSING_FIELDS = "missing_fields"
MISSING_FIELD_OPTIONS = "missing_field_options"
SCHEMA_FIELD_DETAILS = "schema_field_details"
SCHEMA_DESCRIPTION = "schema_description"
SCHEMA_ID = "schema_id"
SCHEMA_COMPLETE = "schema_complete"
SCHEMA_HAS_ANY_VALUE = "schema_has_any_value"

# tools and planner
TOOL_RESULT = "tool_result"
TOOL_STATUS = "tool_status"
MCP_ACTION = "mcp_action"
MCP_TOOL_CODE = "mcp_tool_code"
MCP_TOOL_ARGS = "mcp_tool_args"
MCP_TOOL_GROUP = "mcp_tool_group"
MCP_OPERATION_TAG = "mcp_operation_tag"
MCP_OBSERVATIONS = "mcp_observations"
MCP_FINAL_ANSWER = "mcp_final_answer"
MCP_STATUS = "mcp_status"
MCP_TOOL_EXECUTION_ERROR = "mcp_tool_execution_error"

# rules, state graph, memory, intent agent
RULE_PHASE = "rule_phase"
RULE_EXECUTION_SOURCE = "rule_execution_source"
RULE_EXECUTION_ORIGIN = "rule_execution_origin"
POST_INTENT_RULE = "post_intent_rule"
STATE_GRAPH_VALID = "state_graph_valid"
STATE_GRAPH_SOFT_BLOCK = "state_graph_soft_block"
STATE_GRAPH_BLOCKED = "state_graph_blocked"
MEMORY_SESSION_SUMMARY = "memory_session_summary"
MEMORY_RECALL = "memory_recall"
RESET_REASON = "reset_reason"
INTENT_SCORES = "intent_scores"
INTENT_TOP3 = "intent_top3"
INTENT_COLLISION_CANDIDATES = "intent_collision_candidates"
FOLLOWUPS = "followups"
INTENT_UNMATCHED = "intent_unmatched"

# maps injected for templates (ConvEngine's reserved keys)
SESSION = "session"
CONTEXT = "context"
SCHEMA_JSON = "schema_json"

REQUEST_PARAM_KEYS: frozenset[str] = frozenset({
    RESET, RESTART, CONVERSATION_RESET, TOOL_REQUEST, PENDING_ACTION_KEY, PENDING_ACTION_TASK, APPROVAL_GRANTED,
    APPROVAL_GRANTED_CAMEL, FORCE_INTENT_RESOLUTION, RESOLVE_INTENT, SWITCH_INTENT, SWITCH_FLOW, SWITCH_MODE,
})
"""Params a caller may send for the turn they come with (request switches); never persisted."""

ENGINE_PARAM_KEYS: frozenset[str] = frozenset(
    v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str) and v not in REQUEST_PARAM_KEYS)
"""Params only the engine computes: dropped (and audited) when a caller sends them, never persisted."""

RESET_PARAM_KEYS: tuple[str, ...] = (RESET, RESTART, CONVERSATION_RESET)
