"""Node names: ConvEngine's step names in snake_case, in the default order.

The builder, routing, audit and tests all use these constants; no node name is written
as a bare string in two places.
"""

from __future__ import annotations

LOAD_OR_CREATE_CONVERSATION = "load_or_create_conversation"
RESET_CONVERSATION = "reset_conversation"
PERSIST_CONVERSATION_BOOTSTRAP = "persist_conversation_bootstrap"
AUDIT_USER_INPUT = "audit_user_input"
POLICY_ENFORCEMENT = "policy_enforcement"
DIALOGUE_ACT = "dialogue_act"
INTERACTION_POLICY = "interaction_policy"
ACTION_LIFECYCLE = "action_lifecycle"
CORRECTION = "correction"
DISAMBIGUATION = "disambiguation"
GUARDRAIL = "guardrail"
INTENT_RESOLUTION = "intent_resolution"
RESET_RESOLVED_INTENT = "reset_resolved_intent"
FALLBACK_INTENT_STATE = "fallback_intent_state"
FLOW = "flow"
ADD_CONTAINER_DATA = "add_container_data"
SCHEMA_EXTRACTION = "schema_extraction"
AUTO_ADVANCE = "auto_advance"
PENDING_ACTION = "pending_action"
TOOL_ORCHESTRATION = "tool_orchestration"
MCP_PLANNER = "mcp_planner"
MCP_TOOL_CALL = "mcp_tool_call"
RULES = "rules"
STATE_GRAPH = "state_graph"
KNOWLEDGE_FALLBACK = "knowledge_fallback"
RESPONSE_RESOLUTION = "response_resolution"
POST_RESPONSE_RULES = "post_response_rules"
MEMORY = "memory"
PERSIST_CONVERSATION = "persist_conversation"
PIPELINE_END_GUARD = "pipeline_end_guard"

DEFAULT_ORDER: tuple[str, ...] = (
    LOAD_OR_CREATE_CONVERSATION,
    RESET_CONVERSATION,
    PERSIST_CONVERSATION_BOOTSTRAP,
    AUDIT_USER_INPUT,
    POLICY_ENFORCEMENT,
    DIALOGUE_ACT,
    INTERACTION_POLICY,
    ACTION_LIFECYCLE,
    CORRECTION,
    DISAMBIGUATION,
    GUARDRAIL,
    INTENT_RESOLUTION,
    RESET_RESOLVED_INTENT,
    FALLBACK_INTENT_STATE,
    FLOW,
    ADD_CONTAINER_DATA,
    SCHEMA_EXTRACTION,
    AUTO_ADVANCE,
    PENDING_ACTION,
    TOOL_ORCHESTRATION,
    MCP_PLANNER,
    MCP_TOOL_CALL,
    RULES,
    STATE_GRAPH,
    KNOWLEDGE_FALLBACK,
    RESPONSE_RESOLUTION,
    POST_RESPONSE_RULES,
    MEMORY,
    PERSIST_CONVERSATION,
    PIPELINE_END_GUARD,
)

# Route target meaning "the step after the planner loop" (resolved by the step plan).
AFTER_MCP_LOOP = "__after_mcp_loop__"

# Steps a custom step may not be placed around (the turn's bookends).
FIRST_STEP = LOAD_OR_CREATE_CONVERSATION
LAST_STEP = PIPELINE_END_GUARD

# ConvEngine's Java class names, for users coming from ConvEngine's audit trails.
JAVA_STEP_CLASSES = {name: "".join(p.capitalize() for p in name.split("_")) + "Step" for name in DEFAULT_ORDER}
JAVA_STEP_CLASSES[MCP_PLANNER] = "McpToolStep"
JAVA_STEP_CLASSES[MCP_TOOL_CALL] = "McpToolStep"
JAVA_STEP_CLASSES[FLOW] = "FlowStep"  # convengine's own step
