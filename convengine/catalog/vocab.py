"""ConvEngine's vocabularies in one place: phases, match types, actions, tool groups, acts.

Everything that validates or interprets a ``ce_*`` column value imports it from here.
"""

from __future__ import annotations

ANY = "ANY"
UNKNOWN = "UNKNOWN"
INTENT_COLLISION = "INTENT_COLLISION"
ERROR = "ERROR"

# --- ce_rule.phase ---------------------------------------------------------------------

POST_DIALOGUE_ACT = "POST_DIALOGUE_ACT"
POST_CLASSIFIER_INTENT = "POST_CLASSIFIER_INTENT"
"""Runs only when a classifier resolved the intent (ConvEngine's IntentResolutionStep)."""
POST_AGENT_INTENT = "POST_AGENT_INTENT"
"""Runs only when the intent agent (LLM) accepted an intent (ConvEngine's AgentIntentResolver)."""
POST_INTENT = "POST_INTENT"
"""convengine's own phase: runs after either resolver, after the path's phase."""
POST_SCHEMA_EXTRACTION = "POST_SCHEMA_EXTRACTION"
PRE_AGENT_MCP = "PRE_AGENT_MCP"
POST_SEMANTIC_INTERPRET = "POST_SEMANTIC_INTERPRET"
POST_AGENT_MCP = "POST_AGENT_MCP"
POST_TOOL_EXECUTION = "POST_TOOL_EXECUTION"
PRE_RESPONSE_RESOLUTION = "PRE_RESPONSE_RESOLUTION"
POST_RESPONSE_RESOLUTION = "POST_RESPONSE_RESOLUTION"

PHASES = (
    POST_DIALOGUE_ACT,
    POST_CLASSIFIER_INTENT,
    POST_AGENT_INTENT,
    POST_INTENT,
    POST_SCHEMA_EXTRACTION,
    PRE_AGENT_MCP,
    POST_SEMANTIC_INTERPRET,
    POST_AGENT_MCP,
    POST_TOOL_EXECUTION,
    PRE_RESPONSE_RESOLUTION,
    POST_RESPONSE_RESOLUTION,
)

PHASE_ALIASES = {
    "AGENT_POST_INTENT": POST_AGENT_INTENT,
    "CLASSIFIER_POST_INTENT": POST_CLASSIFIER_INTENT,
    "PIPELINE_RULES": PRE_RESPONSE_RESOLUTION,
    "AGENT_POST_MCP": POST_AGENT_MCP,
    "AGENT_POST_SEMANTIC_INTERPRET": POST_SEMANTIC_INTERPRET,
    "SEMANTIC_INTERPRET_POST": POST_SEMANTIC_INTERPRET,
    "TOOL_POST_EXECUTION": POST_TOOL_EXECUTION,
}


def canonical_phase(value: str | None) -> str | None:
    """The canonical phase for ``value`` (aliases resolved, blank -> default); None if unknown."""
    name = (value or "").strip().upper() or PRE_RESPONSE_RESOLUTION
    if name in PHASES:
        return name
    return PHASE_ALIASES.get(name)


# --- ce_rule.rule_type / action --------------------------------------------------------

RULE_TYPES = ("EXACT", "REGEX", "JSON_PATH", "CONTEXT_JSON_PATH")

SET_STATE = "SET_STATE"
SET_INTENT = "SET_INTENT"
SET_DIALOGUE_ACT = "SET_DIALOGUE_ACT"
SET_INPUT_PARAM = "SET_INPUT_PARAM"
SET_JSON = "SET_JSON"
GET_CONTEXT = "GET_CONTEXT"
GET_SCHEMA_JSON = "GET_SCHEMA_JSON"
GET_SESSION = "GET_SESSION"
SET_TASK = "SET_TASK"
CLEAR_INPUT_PARAM = "CLEAR_INPUT_PARAM"
CLEAR_CONTEXT = "CLEAR_CONTEXT"
HANDOFF = "HANDOFF"

RULE_ACTIONS = (
    SET_STATE,
    SET_INTENT,
    SET_DIALOGUE_ACT,
    SET_INPUT_PARAM,
    SET_JSON,
    GET_CONTEXT,
    GET_SCHEMA_JSON,
    GET_SESSION,
    SET_TASK,
    CLEAR_INPUT_PARAM,
    CLEAR_CONTEXT,
    HANDOFF,
)

# --- policies and classifiers ----------------------------------------------------------

POLICY_TYPES = ("REGEX", "CONTAINS", "STARTS_WITH", "EXACT")
LLM_POLICY = "LLM"
"""ce_policy.rule_type asking the POLICY LLM call site (``pattern`` describes the policy in words)."""
CLASSIFIER_TYPES = ("REGEX", "CONTAINS", "STARTS_WITH", "EXACT", "SEMANTIC")

# --- responses and templates -----------------------------------------------------------

RESPONSE_TYPES = ("EXACT", "DERIVED")
RESPONSE_FORMATS = ("TEXT", "JSON")
TEMPLATE_FORMATS = ("TEXT", "JSON", "SCHEMA_JSON", "SEMANTIC_INTERPRET")
INTERACTION_MODES = (
    "NORMAL",
    "IDLE",
    "COLLECT",
    "CONFIRM",
    "PROCESSING",
    "FINAL",
    "ERROR",
    "DISAMBIGUATE",
    "FOLLOW_UP",
    "PENDING_ACTION",
    "REVIEW",
)
CONTRACT_CAPABILITIES = ("affirm", "edit", "retry", "reset")
CONTRACT_EXPECTATIONS = ("structured_input",)

# --- tools -----------------------------------------------------------------------------

TOOL_GROUPS = (
    "DB",
    "HTTP_API",
    "WORKFLOW_ACTION",
    "DOCUMENT_RETRIEVAL",
    "CALCULATOR_TRANSFORM",
    "NOTIFICATION",
    "FILES",
    "MCP_SERVER",
)

TOOL_GROUP_ALIASES = {
    "MCP_DB": "DB",
    "DATABASE": "DB",
    "SQL": "DB",
    "HTTP": "HTTP_API",
    "API": "HTTP_API",
    "ACTION": "WORKFLOW_ACTION",
    "WORKFLOW": "WORKFLOW_ACTION",
    "DOC": "DOCUMENT_RETRIEVAL",
    "DOCUMENT": "DOCUMENT_RETRIEVAL",
    "RAG": "DOCUMENT_RETRIEVAL",
    "CALC": "CALCULATOR_TRANSFORM",
    "CALCULATOR": "CALCULATOR_TRANSFORM",
    "TRANSFORM": "CALCULATOR_TRANSFORM",
    "NOTIFY": "NOTIFICATION",
    "FILE": "FILES",
    "MCP": "MCP_SERVER",
}


def canonical_tool_group(value: str | None) -> str | None:
    """The canonical tool group (aliases resolved, blank -> DB); None if unknown."""
    name = (value or "").strip().upper().replace("-", "_") or "DB"
    if name in TOOL_GROUPS:
        return name
    return TOOL_GROUP_ALIASES.get(name)


# --- dialogue acts and decisions -------------------------------------------------------

DIALOGUE_ACTS = ("AFFIRM", "NEGATE", "ANSWER", "EDIT", "RESET", "QUESTION", "NEW_REQUEST", "GREETING")

DEFAULT_ACT_REGEXES = {
    "AFFIRM": r"^\s*(yes|yep|yeah|ok|okay|sure|go ahead|do that|please do|confirm|approved?)\s*$",
    "NEGATE": r"^\s*(no|nope|nah|cancel|stop|don't|do not)\s*$",
    "EDIT": r"^\s*(edit|revise|change|modify|update)\s*$",
    "RESET": r"^\s*(reset|restart|start over)\s*$",
    "GREETING": r"^\s*(hi|hello|hey|greetings|good morning|good afternoon|good evening|howdy)\s*$",
}

POLICY_DECISIONS = (
    "EXECUTE_PENDING_ACTION",
    "REJECT_PENDING_ACTION",
    "FILL_PENDING_SLOT",
    "RECLASSIFY_INTENT",
)

ROUTING_DECISIONS = (
    "CONTINUE_STANDARD_FLOW",
    "PROCEED_CONFIRMED",
    "APPLY_CORRECTION",
    "RETRY_IN_PLACE",
    "HANDLE_AS_ANSWER",
)

PENDING_ACTION_STATUSES = ("OPEN", "IN_PROGRESS", "EXECUTED", "REJECTED", "EXPIRED")

# --- knowledge search ------------------------------------------------------------------

KNOWLEDGE_FILTER_KEY = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
"""A metadata filter's key (``where:`` of a knowledge node, ``knowledge.fallback.filters``, ``filters=``)."""

# --- feedback (ce_mcp_user_feedback.feedback_type) --------------------------------------

THUMBS_UP = "THUMBS_UP"
THUMBS_DOWN = "THUMBS_DOWN"
FEEDBACK_TYPES = (THUMBS_UP, THUMBS_DOWN)

