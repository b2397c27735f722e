"""Every audit stage the engine writes, with what it means: the one place a stage name is spelled.

The values are the exact strings stored in ``ce_audit.stage`` (ConvEngine's admin UI and trace
read them), so a constant's value never changes. Emit sites, filters, the trace builder, the CLI,
the conversation-test runner and the tests use these names; ``tests/test_catalogues.py`` fails
when a stage is written as a bare string elsewhere in ``convengine/``, and the audit reference
(``docs/reference/audit-stages.md``) is generated from :data:`STAGES`.

Stages built at run time: a rule phase suffixes its stages with the step that ran it
(:func:`by_source`: ``RULE_MATCH (RulesStep)``), an applied rule action is audited under the
action's name (``SET_STATE``...), and the intent step names the resolver that won
(:func:`intent_resolved_by`).
"""

from __future__ import annotations

STAGES: dict[str, tuple[str, str]] = {}
"""stage -> (area, what it records), in the order of the turn."""


def _stage(name: str, area: str, doc: str) -> str:
    STAGES[name] = (area, doc)
    return name


def by_source(stage: str, source: str) -> str:
    """A rule phase's stage as stored: ``RULE_MATCH (RulesStep)``."""
    return f"{stage} ({source})"


def intent_resolved_by(source: str) -> str:
    """The stage naming the resolver that set the intent (``CLASSIFIER`` or ``AGENT``)."""
    return f"{INTENT_RESOLVED_BY}{source}"


# --- every step -------------------------------------------------------------------------
_A = "steps"
STEP_ENTER = _stage("STEP_ENTER", _A, "a pipeline step starts (`step`, `stepClass`)")
STEP_EXIT = _stage("STEP_EXIT", _A, "a step ended (`durationMs`)")
STEP_ERROR = _stage("STEP_ERROR", _A, "a step raised (`errorType`, `errorMessage`); the turn fails")
STEP_HOOK_ERROR = _stage("STEP_HOOK_ERROR", _A, "a host step hook raised; the step still ran")
STEP_SKIPPED = _stage("STEP_SKIPPED", _A, "a step with nothing to do was skipped (`reason`)")

# --- bootstrap --------------------------------------------------------------------------
_A = "bootstrap"
INPUT_PARAMS_REJECTED = _stage("INPUT_PARAMS_REJECTED", _A, "request params only the engine may set were dropped")
CONVERSATION_ADOPTED = _stage("CONVERSATION_ADOPTED", _A, "an existing ce_conversation row was taken over")
CONVERSATION_RESET = _stage("CONVERSATION_RESET", _A, "intent, state, context and params were cleared")
CONFIG_VERSION = _stage("CONFIG_VERSION", _A, "the configuration version the turn runs on (`version`, `hash`, "
                        "`channel`, `reason`: pinned, channel, draft or version)")
USER_INPUT = _stage("USER_INPUT", _A, "the user's message and the caller's input params")

# --- policy and guardrail ---------------------------------------------------------------
_A = "policy"
POLICY_PATTERN_TIMEOUT = _stage("POLICY_PATTERN_TIMEOUT", _A, "a ce_policy pattern ran past its time limit")
POLICY_LLM_CHECK = _stage("POLICY_LLM_CHECK", _A, "an LLM policy was asked about the message")
POLICY_LLM_UNDECIDED = _stage("POLICY_LLM_UNDECIDED", _A, "an LLM policy gave no usable verdict")
POLICY_BLOCK = _stage("POLICY_BLOCK", _A, "a policy blocked the turn")
GUARDRAIL_ALLOW = _stage("GUARDRAIL_ALLOW", _A, "the guardrail let the message through")
GUARDRAIL_DENY = _stage("GUARDRAIL_DENY", _A, "the guardrail blocked the message or an unapproved action")

# --- dialogue act and interaction policy ------------------------------------------------
_A = "dialogue act"
DIALOGUE_ACT_PATTERN_TIMEOUT = _stage("DIALOGUE_ACT_PATTERN_TIMEOUT", _A, "an act regex ran past its time limit")
DIALOGUE_ACT_LLM_INPUT = _stage("DIALOGUE_ACT_LLM_INPUT", _A, "the prompt sent to classify the act")
DIALOGUE_ACT_LLM_OUTPUT = _stage("DIALOGUE_ACT_LLM_OUTPUT", _A, "the model's act classification")
DIALOGUE_ACT_LLM_ERROR = _stage("DIALOGUE_ACT_LLM_ERROR", _A, "the act classification call failed")
DIALOGUE_ACT_LLM_SKIPPED = _stage("DIALOGUE_ACT_LLM_SKIPPED", _A, "the model was not asked for the act")
DIALOGUE_ACT_CLASSIFIED = _stage("DIALOGUE_ACT_CLASSIFIED", _A, "the act chosen, its source and confidence")
INTERACTION_POLICY_DECIDED = _stage("INTERACTION_POLICY_DECIDED", _A, "what the act means for a pending action or slot")

# --- pending actions and disambiguation -------------------------------------------------
_A = "pending actions"
PENDING_ACTION_LIFECYCLE = _stage("PENDING_ACTION_LIFECYCLE", _A, "the pending-action runtime opened, expired or closed")
DISAMBIGUATION_REQUIRED = _stage("DISAMBIGUATION_REQUIRED", _A, "several pending actions fit: the user is asked which")
DISAMBIGUATION_RESOLVED = _stage("DISAMBIGUATION_RESOLVED", _A, "one pending action was chosen")
DISAMBIGUATION_SKIPPED = _stage("DISAMBIGUATION_SKIPPED", _A, "nothing to disambiguate (`reason`)")
DISAMBIGUATION_LLM_ERROR = _stage("DISAMBIGUATION_LLM_ERROR", _A, "the disambiguation question call failed")
PENDING_ACTION_SKIPPED = _stage("PENDING_ACTION_SKIPPED", _A, "no pending action ran (`reason`)")
PENDING_ACTION_EXECUTED = _stage("PENDING_ACTION_EXECUTED", _A, "a confirmed action's task ran")
PENDING_ACTION_FAILED = _stage("PENDING_ACTION_FAILED", _A, "a confirmed action's task raised")
PENDING_ACTION_REJECTED = _stage("PENDING_ACTION_REJECTED", _A, "the user declined the pending action")

# --- correction -------------------------------------------------------------------------
_A = "correction"
CORRECTION_STEP_RETRY_REQUESTED = _stage("CORRECTION_STEP_RETRY_REQUESTED", _A, "the user asked to retry in place")
CORRECTION_STEP_CONFIRM_ACCEPT = _stage("CORRECTION_STEP_CONFIRM_ACCEPT", _A, "the user confirmed complete slots")
CORRECTION_STEP_CORRECTION_PATCH_APPLIED = _stage("CORRECTION_STEP_CORRECTION_PATCH_APPLIED", _A,
                                                  "an edit changed one collected slot")
CORRECTION_STEP_PATCH_NOT_APPLIED = _stage("CORRECTION_STEP_PATCH_NOT_APPLIED", _A, "an edit named no known slot")

# --- intent resolution ------------------------------------------------------------------
_A = "intent"
INTENT_RESOLVE_START = _stage("INTENT_RESOLVE_START", _A, "intent resolution begins")
INTENT_RESOLVE_FORCED = _stage("INTENT_RESOLVE_FORCED", _A, "a param, phrase or command forced re-resolution")
INTENT_RESOLVE_SKIPPED_POLICY = _stage("INTENT_RESOLVE_SKIPPED_POLICY", _A, "the interaction policy kept the intent")
INTENT_RESOLVE_SKIPPED_SCHEMA_COLLECTION = _stage("INTENT_RESOLVE_SKIPPED_SCHEMA_COLLECTION", _A,
                                                  "slots are being collected: the intent is locked")
INTENT_RESOLVE_SKIPPED_STICKY_INTENT = _stage("INTENT_RESOLVE_SKIPPED_STICKY_INTENT", _A,
                                              "the intent is sticky while its schema is incomplete")
INTENT_CLASSIFIER_PATTERN_TIMEOUT = _stage("INTENT_CLASSIFIER_PATTERN_TIMEOUT", _A,
                                           "a classifier pattern ran past its time limit")
INTENT_CLASSIFIER_SEMANTIC_SKIPPED = _stage("INTENT_CLASSIFIER_SEMANTIC_SKIPPED", _A,
                                            "semantic classifiers were not consulted (`reason`)")
INTENT_CLASSIFIER_SEMANTIC_SCORES = _stage("INTENT_CLASSIFIER_SEMANTIC_SCORES", _A, "semantic classifier similarities")
INTENT_CLASSIFIER_COLLISION = _stage("INTENT_CLASSIFIER_COLLISION", _A, "classifiers matched several intents")
INTENT_CLASSIFIER_NO_MATCH = _stage("INTENT_CLASSIFIER_NO_MATCH", _A, "no classifier matched")
INTENT_CLASSIFICATION_MATCHED = _stage("INTENT_CLASSIFICATION_MATCHED", _A, "a classifier matched")
INTENT_AGENT_SKIPPED = _stage("INTENT_AGENT_SKIPPED", _A, "the intent agent was not asked (`reason`)")
INTENT_AGENT_LLM_INPUT = _stage("INTENT_AGENT_LLM_INPUT", _A, "the intent agent's prompt")
INTENT_AGENT_LLM_OUTPUT = _stage("INTENT_AGENT_LLM_OUTPUT", _A, "the intent agent's answer")
INTENT_AGENT_SCORES = _stage("INTENT_AGENT_SCORES", _A, "the agent's scored candidates")
INTENT_AGENT_COLLISION = _stage("INTENT_AGENT_COLLISION", _A, "the agent's top candidates were too close")
INTENT_AGENT_CLARIFICATION_SUPPRESSED_SCHEMA_FLOW = _stage(
    "INTENT_AGENT_CLARIFICATION_SUPPRESSED_SCHEMA_FLOW", _A, "no clarifying question while slots are collected")
INTENT_AGENT_STATE_IGNORED = _stage("INTENT_AGENT_STATE_IGNORED", _A, "the agent named a state the intent lacks")
INTENT_AGENT_NEEDS_CLARIFICATION = _stage("INTENT_AGENT_NEEDS_CLARIFICATION", _A, "the agent asks the user to clarify")
INTENT_AGENT_REJECTED = _stage("INTENT_AGENT_REJECTED", _A, "the agent's answer was not accepted (`reason`)")
INTENT_AGENT_ACCEPTED = _stage("INTENT_AGENT_ACCEPTED", _A, "the agent's intent was accepted")
INTENT_COLLISION_DETECTED = _stage("INTENT_COLLISION_DETECTED", _A, "an intent collision is put to the user")
INTENT_COLLISION_LLM_ERROR = _stage("INTENT_COLLISION_LLM_ERROR", _A, "the collision question call failed")
INTENT_COLLISION_RESOLVED = _stage("INTENT_COLLISION_RESOLVED", _A, "the collision question was written")
INTENT_RESOLVE_NO_CHANGE = _stage("INTENT_RESOLVE_NO_CHANGE", _A, "resolution kept the current intent")
INTENT_RESOLVED_BY = "INTENT_RESOLVED_BY_"
INTENT_RESOLVED_BY_CLASSIFIER = _stage("INTENT_RESOLVED_BY_CLASSIFIER", _A, "a classifier set the intent")
INTENT_RESOLVED_BY_AGENT = _stage("INTENT_RESOLVED_BY_AGENT", _A, "the intent agent set the intent")
INTENT_SMALL_TALK_MATCHED = _stage("INTENT_SMALL_TALK_MATCHED", _A, "a small-talk topic scored at or above `flows.small-talk-min-score` and won before the intents")
INTENT_MISSING = _stage("INTENT_MISSING", _A, "no intent was resolved: `UNKNOWN` is used")
INTENT_UPDATED = _stage("INTENT_UPDATED", _A, "the intent changed (`fromIntent`, `toIntent`, `cause`: `CLASSIFIER` or "
                        "`AGENT`, `rule <id>`, `task`, `FLOW` or `response`); resets, adoption and a state-graph block "
                        "audit their own stages")
STATE_MISSING = _stage("STATE_MISSING", _A, "no state was resolved: `UNKNOWN` is used")

# --- container data, schema extraction, auto advance ------------------------------------
_A = "schema"
CONTAINER_DATA_SKIPPED = _stage("CONTAINER_DATA_SKIPPED", _A, "no ce_container_config row for the intent and state")
CONTAINER_DATA_FAILED = _stage("CONTAINER_DATA_FAILED", _A, "a container provider or transformer failed")
CONTAINER_DATA_EXECUTED = _stage("CONTAINER_DATA_EXECUTED", _A, "a container provider ran")
CONTAINER_DATA_ATTACHED = _stage("CONTAINER_DATA_ATTACHED", _A, "container data was added to the context")
SCHEMA_EXTRACTION_SKIPPED = _stage("SCHEMA_EXTRACTION_SKIPPED", _A, "no slots were extracted (`reason`)")
SCHEMA_EXTRACTION_START = _stage("SCHEMA_EXTRACTION_START", _A, "slot extraction begins")
SCHEMA_EXTRACTION_LLM_INPUT = _stage("SCHEMA_EXTRACTION_LLM_INPUT", _A, "the extraction prompt")
SCHEMA_EXTRACTION_LLM_OUTPUT = _stage("SCHEMA_EXTRACTION_LLM_OUTPUT", _A, "the extracted values")
SCHEMA_STATUS = _stage("SCHEMA_STATUS", _A, "which slots are filled and missing")
SCHEMA_SCOPE_CLEARED = _stage("SCHEMA_SCOPE_CLEARED", _A, "the conversation's slot schema was let go")
AUTO_ADVANCE_SKIPPED_NO_SCHEMA = _stage("AUTO_ADVANCE_SKIPPED_NO_SCHEMA", _A, "no schema to recompute facts for")
AUTO_ADVANCE_FACTS = _stage("AUTO_ADVANCE_FACTS", _A, "recomputed schema facts")

# --- tools and the planner --------------------------------------------------------------
_A = "tools"
TOOL_ORCHESTRATION_SKIPPED = _stage("TOOL_ORCHESTRATION_SKIPPED", _A, "no tool request to run (`reason`)")
TOOL_ORCHESTRATION_REQUEST = _stage("TOOL_ORCHESTRATION_REQUEST", _A, "a caller's tool request")
TOOL_ORCHESTRATION_RESULT = _stage("TOOL_ORCHESTRATION_RESULT", _A, "the requested tool's result")
TOOL_ORCHESTRATION_ERROR = _stage("TOOL_ORCHESTRATION_ERROR", _A, "the requested tool failed")
MCP_NO_TOOLS_AVAILABLE = _stage("MCP_NO_TOOLS_AVAILABLE", _A, "no tool is in scope for the intent and state")
MCP_SKIPPED_SCHEMA_INCOMPLETE = _stage("MCP_SKIPPED_SCHEMA_INCOMPLETE", _A, "the planner waits for missing slots")
MCP_SKIPPED_DIALOGUE_ACT = _stage("MCP_SKIPPED_DIALOGUE_ACT", _A, "the act does not call for the planner")
MCP_SKIPPED_GREETING = _stage("MCP_SKIPPED_GREETING", _A, "a greeting does not call for the planner")
MCP_SKIPPED_PENDING_CLARIFICATION = _stage("MCP_SKIPPED_PENDING_CLARIFICATION", _A,
                                           "a clarifying question is pending")
MCP_PLAN_SKIPPED = _stage("MCP_PLAN_SKIPPED", _A, "no model is configured for the planner")
MCP_CONTEXT_CLEARED = _stage("MCP_CONTEXT_CLEARED", _A, "the planner's observations of an earlier turn were cleared")
MCP_LOOP_LIMIT_REACHED = _stage("MCP_LOOP_LIMIT_REACHED", _A, "the planner loop hit its limit")
MCP_PLAN_LLM_INPUT = _stage("MCP_PLAN_LLM_INPUT", _A, "the planner's prompt")
MCP_PLAN_LLM_OUTPUT = _stage("MCP_PLAN_LLM_OUTPUT", _A, "the planner's decision")
MCP_FINAL_ANSWER = _stage("MCP_FINAL_ANSWER", _A, "the planner answered")
MCP_TOOL_CALL = _stage("MCP_TOOL_CALL", _A, "the planner called a tool")
MCP_DUPLICATE_TOOL_CALL_SUPPRESSED = _stage("MCP_DUPLICATE_TOOL_CALL_SUPPRESSED", _A,
                                            "the same call with the same arguments was not repeated")
MCP_TOOL_RESULT = _stage("MCP_TOOL_RESULT", _A, "a planner tool's result")
MCP_TOOL_ERROR = _stage("MCP_TOOL_ERROR", _A, "a planner tool failed")
MCP_TOOL_ROOT_CAUSE = _stage("MCP_TOOL_ROOT_CAUSE", _A, "the underlying cause of a tool failure")
MCP_DB_SQL_EXECUTION = _stage("MCP_DB_SQL_EXECUTION", _A, "a DB tool's statement ran")
MCP_DB_SQL_REFUSED = _stage("MCP_DB_SQL_REFUSED", _A, "a DB tool's statement was refused by the SQL guard")

# --- rules and the state graph ----------------------------------------------------------
_A = "rules"
RULE_MATCH = _stage("RULE_MATCH", _A, "a rule matched (suffixed with the step that ran the phase)")
RULE_NO_MATCH = _stage("RULE_NO_MATCH", _A, "a rule did not match (`reason`)")
RULE_APPLIED = _stage("RULE_APPLIED", _A, "a matched rule's action was applied (after the action's own stage)")
RULE_PASS_LIMIT_REACHED = _stage("RULE_PASS_LIMIT_REACHED", _A, "a phase stopped at its pass limit")
RULE_PHASE_RUN = _stage("RULE_PHASE_RUN", _A, "a rule phase ran: passes and matches")
SET_TASK_FAILED = _stage("SET_TASK_FAILED", _A, "a SET_TASK action's task raised")
STATE_GRAPH_SKIPPED = _stage("STATE_GRAPH_SKIPPED", _A, "the state graph check is off")
STATE_GRAPH_VALID = _stage("STATE_GRAPH_VALID", _A, "the turn's transitions are in ce_state_graph")
STATE_GRAPH_VIOLATION = _stage("STATE_GRAPH_VIOLATION", _A, "a transition is not in ce_state_graph")
STATE_GRAPH_BLOCKED = _stage("STATE_GRAPH_BLOCKED", _A, "a violation was blocked: the state was put back")

# --- knowledge --------------------------------------------------------------------------
_A = "knowledge"
KNOWLEDGE_FALLBACK_NO_MATCH = _stage("KNOWLEDGE_FALLBACK_NO_MATCH", _A, "no passage was close enough")
KNOWLEDGE_FALLBACK_ANSWERED = _stage("KNOWLEDGE_FALLBACK_ANSWERED", _A, "the knowledge bases answered")
KNOWLEDGE_MODEL_MISMATCH = _stage("KNOWLEDGE_MODEL_MISMATCH", _A,
                                  "a base embedded by another model was searched by full text only")
KNOWLEDGE_EMBEDDING_FAILED = _stage("KNOWLEDGE_EMBEDDING_FAILED", _A, "the query could not be embedded")
KNOWLEDGE_SYNTHESIS_SKIPPED = _stage("KNOWLEDGE_SYNTHESIS_SKIPPED", _A, "passages were returned without synthesis")
KNOWLEDGE_SYNTHESIS_FAILED = _stage("KNOWLEDGE_SYNTHESIS_FAILED", _A, "the synthesis call failed")

# --- response ---------------------------------------------------------------------------
_A = "response"
RESPONSE_MAPPING_NOT_FOUND = _stage("RESPONSE_MAPPING_NOT_FOUND", _A, "no ce_response row for the intent and state")
RESOLVE_RESPONSE_SELECTED = _stage("RESOLVE_RESPONSE_SELECTED", _A, "the ce_response row chosen")
EXACT_RESPONSE_RENDERING = _stage("EXACT_RESPONSE_RENDERING", _A, "an EXACT response's template was rendered")
RESOLVE_RESPONSE_LLM_INPUT = _stage("RESOLVE_RESPONSE_LLM_INPUT", _A, "a DERIVED response's prompt")
RESOLVE_RESPONSE_LLM_OUTPUT = _stage("RESOLVE_RESPONSE_LLM_OUTPUT", _A, "a DERIVED response's model output")
RESPONSE_INTENT_STATE_APPLIED = _stage("RESPONSE_INTENT_STATE_APPLIED", _A, "a JSON response set intent or state")
RESPONSE_INTENT_STATE_REJECTED = _stage("RESPONSE_INTENT_STATE_REJECTED", _A,
                                        "a JSON response named an unknown intent or state")
RESPONSE_EXACT = _stage("RESPONSE_EXACT", _A, "the EXACT response text")
RESOLVE_RESPONSE = _stage("RESOLVE_RESPONSE", _A, "the turn's payload")
ASSISTANT_OUTPUT = _stage("ASSISTANT_OUTPUT", _A, "what the user is shown")

# --- LLM calls --------------------------------------------------------------------------
_A = "llm"
LLM_CALL = _stage("LLM_CALL", _A, "a model call: call site, model, tokens, latency")
LLM_CALL_ERROR = _stage("LLM_CALL_ERROR", _A, "a model call failed")
LLM_CALL_LOG_FAILED = _stage("LLM_CALL_LOG_FAILED", _A, "the call could not be written to the LLM call log")
LLM_USAGE_WRITE_FAILED = _stage("LLM_USAGE_WRITE_FAILED", _A, "the spend ledger could not be written")
LLM_SPEND_CAP_REACHED = _stage("LLM_SPEND_CAP_REACHED", _A, "a spend cap stopped a model call")

# --- memory and the end of the turn -----------------------------------------------------
_A = "memory"
LONG_TERM_PROPERTIES_LOADED = _stage("LONG_TERM_PROPERTIES_LOADED", _A, "the user's long-term properties were read")
LONG_TERM_PROPERTIES_SAVED = _stage("LONG_TERM_PROPERTIES_SAVED", _A, "the user's long-term properties were written")
MEMORY_SKIPPED = _stage("MEMORY_SKIPPED", _A, "the summary was not updated (`reason`)")
MEMORY_UPDATED = _stage("MEMORY_UPDATED", _A, "the rolling summary was updated")
ENGINE_RETURN = _stage("ENGINE_RETURN", _A, "the turn's result as returned and what it changed in the context")
PIPELINE_TIMING = _stage("PIPELINE_TIMING", _A, "each step's time and the turn's total")
UNDO = _stage("UNDO", _A, "a turn was undone (its own ce_audit row)")
REDO = _stage("REDO", _A, "an undone turn was redone")
UNDO_REFUSED = _stage("UNDO_REFUSED", _A, "undo or redo was refused")

# --- conversation flows -----------------------------------------------------------------
_A = "flows"
FLOW_STARTED = _stage("FLOW_STARTED", _A, "a flow was entered")
FLOW_NODE = _stage("FLOW_NODE", _A, "a flow node ran")
FLOW_WAITING = _stage("FLOW_WAITING", _A, "the flow waits for the user's next message")
FLOW_DIGRESSION = _stage("FLOW_DIGRESSION", _A, "another flow interrupted the active one")
FLOW_RETURNED = _stage("FLOW_RETURNED", _A, "a subflow or digression returned")
FLOW_COMPLETED = _stage("FLOW_COMPLETED", _A, "a flow reached its end")
FLOW_SUBFLOW_CALL = _stage("FLOW_SUBFLOW_CALL", _A, "a flow called a subflow")
FLOW_ENTITY_CAPTURED = _stage("FLOW_ENTITY_CAPTURED", _A, "an entity node captured its value")
FLOW_ENTITY_REPROMPT = _stage("FLOW_ENTITY_REPROMPT", _A, "an entity node asked again")
FLOW_ENTITY_ESCALATED = _stage("FLOW_ENTITY_ESCALATED", _A, "an entity node gave up after its attempts")
FLOW_ENTITY_LLM_EXTRACTED = _stage("FLOW_ENTITY_LLM_EXTRACTED", _A, "an entity node asked the LLM for the value (`found`)")
FLOW_ENTITY_LLM_SKIPPED = _stage("FLOW_ENTITY_LLM_SKIPPED", _A, "an entity node's LLM extraction was skipped (`reason`: no LLM, spend cap, LLM error)")
FLOW_VARIABLE_SET = _stage("FLOW_VARIABLE_SET", _A, "a set node changed variables")
FLOW_SERVICE_CALLED = _stage("FLOW_SERVICE_CALLED", _A, "a service node's call returned")
FLOW_SERVICE_FAILED = _stage("FLOW_SERVICE_FAILED", _A, "a service node's call failed")
FLOW_SCRIPT_RAN = _stage("FLOW_SCRIPT_RAN", _A, "a python node's script ran")
FLOW_SCRIPT_FAILED = _stage("FLOW_SCRIPT_FAILED", _A, "a python node's script failed")
FLOW_KNOWLEDGE = _stage("FLOW_KNOWLEDGE", _A, "a knowledge node searched")
FLOW_AGENT_ANSWERED = _stage("FLOW_AGENT_ANSWERED", _A, "an agent node answered")
FLOW_AGENT_TOOL = _stage("FLOW_AGENT_TOOL", _A, "an agent node called a tool")
FLOW_AGENT_FAILED = _stage("FLOW_AGENT_FAILED", _A, "an agent node failed")
FLOW_HANDOFF = _stage("FLOW_HANDOFF", _A, "the conversation was handed to a person")
FLOW_HANDOFF_MESSAGE = _stage("FLOW_HANDOFF_MESSAGE", _A, "a message during a handoff")
FLOW_HANDOFF_RESUMED = _stage("FLOW_HANDOFF_RESUMED", _A, "the flow resumed after a handoff")
FLOW_STEP_LIMIT = _stage("FLOW_STEP_LIMIT", _A, "the walk hit its per-turn node limit")
FLOW_RESET = _stage("FLOW_RESET", _A, "the flow position was cleared")

# --- workflow graph runtime -------------------------------------------------------------
_A = "workflows"
WORKFLOW_STARTED = _stage("WORKFLOW_STARTED", _A, "a workflow was entered (`workflow`, `entry`, `cause`: root, "
                          "intent or sub-workflow)")
WORKFLOW_NODE = _stage("WORKFLOW_NODE", _A, "a workflow node ran (`workflow`, `node`, `type`)")
WORKFLOW_ROUTED = _stage("WORKFLOW_ROUTED", _A, "a successor was chosen (`workflow`, `from`, `to`, `condition`: the "
                         "edge's condition.expr that held, or none for the default edge)")
WORKFLOW_TOOL_EXECUTED = _stage("WORKFLOW_TOOL_EXECUTED", _A, "a tool node ran its tool through the tool bridge (the "
                                "`workflow.tool.executed` trace event) "
                                "(`workflow`, `node`, `tool`, `status`: OK or ERROR, `variable`)")
WORKFLOW_CALL = _stage("WORKFLOW_CALL", _A, "a workflow node handed over to a sub-workflow (`workflow`, `node`, "
                       "`subWorkflow`)")
WORKFLOW_WAITING = _stage("WORKFLOW_WAITING", _A, "the workflow waits for the user's next message")
WORKFLOW_RETURNED = _stage("WORKFLOW_RETURNED", _A, "a sub-workflow ended and its caller goes on")
WORKFLOW_COMPLETED = _stage("WORKFLOW_COMPLETED", _A, "a workflow reached an end node")
WORKFLOW_RESET = _stage("WORKFLOW_RESET", _A, "the workflow position was cleared")

# --- chains (convengine.chains): audited on the run's conversation ------------------------
_A = "chains"
CHAIN_RUN_STARTED = _stage("CHAIN_RUN_STARTED", _A, "a chain run started (`runId`, `chain`, `trigger`)")
CHAIN_STEP = _stage("CHAIN_STEP", _A, "a chain step finished (`runId`, `seq`, `step`, `type`, `output`)")
CHAIN_STEP_FAILED = _stage("CHAIN_STEP_FAILED", _A, "a chain step failed; the run is FAILED (`errorCode`, `message`)")
CHAIN_WAITING = _stage("CHAIN_WAITING", _A, "a chain run paused at a human step")
CHAIN_SCHEDULED = _stage("CHAIN_SCHEDULED", _A, "a chain run paused at a schedule step until `dueAt`")
CHAIN_RESUMED = _stage("CHAIN_RESUMED", _A, "a paused chain run was resumed (`by`: a person or the scheduler)")
CHAIN_NOTIFY = _stage("CHAIN_NOTIFY", _A, "a notify step's message (`text`, `data`), streamed live")
CHAIN_WEBHOOK_REFUSED = _stage("CHAIN_WEBHOOK_REFUSED", _A, "a webhook step's URL was refused (private, loopback, changed host)")
CHAIN_RUN_COMPLETED = _stage("CHAIN_RUN_COMPLETED", _A, "a chain run reached its end")

# --- outside a turn ---------------------------------------------------------------------
_A = "outside a turn"
MCP_USER_FEEDBACK = _stage("MCP_USER_FEEDBACK", _A, "thumbs up/down on a conversation (from the feedback API)")
VERBOSE = _stage("VERBOSE", _A, "a ce_verbose progress message: streamed, never stored")

del _A
