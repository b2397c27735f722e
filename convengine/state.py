"""EngineState: what the checkpointer carries, split into conversation- and turn-scoped keys.

Conversation-scoped keys survive between turns. Turn-scoped keys are reset by
``load_or_create_conversation`` at the start of every turn, so engine-computed flags
never leak into the next turn. Working input params follow the same split: keys in
:data:`TURN_PARAM_KEYS` are dropped when the turn's params are persisted.

Nothing here grows with the length of a conversation: the window of recent turns is
bounded by ``flow.conversation_history.max_turns``; full history lives in
``ce_conversation_history`` and the audit trail in ``ce_audit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from typing_extensions import TypedDict


class TurnInput(TypedDict, total=False):
    """What one turn brings: the message, its params, the reset flag."""

    text: str
    params: dict[str, Any]
    reset: bool
    turn_id: str


class EngineInput(TypedDict, total=False):
    """The graph's input: one turn (``conversation_id`` defaults to the thread id)."""

    conversation_id: str
    turn_input: TurnInput


class EngineState(TypedDict, total=False):
    # --- conversation-scoped ----------------------------------------------------------
    conversation_id: str
    status: str
    """RUNNING, or BLOCKED after a policy hit (ConvEngine's values)."""
    intent: str
    state: str
    context: dict[str, Any]
    """ConvEngine's context_json: extracted fields, pending_action_runtime, pending_clarification,
    intent_lock, memory, mcp, container_data..."""
    input_params: dict[str, Any]
    """Caller params and SET_INPUT_PARAM values that persist across turns."""
    turn: int
    """Completed turns of this conversation (a counter, not derived from history)."""
    recent_turns: list[dict[str, Any]]
    """The newest turns ``{user, assistant}``, oldest first, at most max_turns long."""
    schema_scope: dict[str, Any] | None
    """The slot schema chosen while collecting ``{schema_id, intent, state}``: it stays with the
    conversation through confirmation and processing until the intent changes or a reset."""
    flow: dict[str, Any]
    """The conversation flows' position: call ``stack`` (flow, node, mode), ``vars`` (session.*),
    entity ``attempts`` and ``handoff`` (see convengine.flows)."""
    # --- turn-scoped ------------------------------------------------------------------
    turn_input: dict[str, Any]
    """This turn's request: ``text``, ``params``, ``reset``, ``turn_id``."""
    user_text: str
    standalone_query: str | None
    params: dict[str, Any]
    """Working input params: persisted ones, the request's, and this turn's engine flags."""
    turn_start: dict[str, Any]
    """Intent and state when the turn began (the state graph validates from here)."""
    schema_facts: dict[str, Any]
    transitions: list[dict[str, Any]]
    """Every state change of this turn, with what caused it."""
    payload: dict[str, Any] | None
    mcp_loop: dict[str, Any]
    last_llm: dict[str, Any]
    kept_params: list[str]
    """Params a rule (SET_INPUT_PARAM) or a task set this turn: they persist with the caller's."""
    new_conversation: bool
    """This turn created the conversation (no checkpoint before it, nothing adopted)."""
    persisted: bool
    """persist_conversation settled this turn's row: the caller commits it (convengine.engine.commit)."""
    reply: dict[str, Any] | None
    """What the turn returns when a FINAL response transformer changed it (the stored answer is ``payload``)."""


CONVERSATION_KEYS: tuple[str, ...] = (
    "conversation_id",
    "status",
    "intent",
    "state",
    "context",
    "input_params",
    "turn",
    "recent_turns",
    "schema_scope",
    "flow",
)


def turn_defaults() -> dict[str, Any]:
    """Fresh values for every turn-scoped key (the input key is kept by the caller)."""
    return {
        "user_text": "",
        "standalone_query": None,
        "params": {},
        "turn_start": {},
        "schema_facts": {},
        "transitions": [],
        "payload": None,
        "mcp_loop": {},
        "last_llm": {},
        "kept_params": [],
        "new_conversation": False,
        "persisted": False,
        "reply": None,
    }


TURN_KEYS: tuple[str, ...] = ("turn_input", *turn_defaults())

# Params a caller may send for the turn they come with (seed 001's consumer keys and ConvEngine's
# request switches); they act within what the pack grants and are never persisted.
REQUEST_PARAM_KEYS: frozenset[str] = frozenset(
    {
        "reset", "restart", "conversation_reset", "tool_request", "pending_action_key", "pending_action_task",
        "approval_granted", "approvalGranted", "force_intent_resolution", "resolve_intent", "switch_intent",
        "switch_flow", "switch_mode",
    }
)

# Params only the engine computes: dropped (and audited) when a caller sends them, never persisted.
ENGINE_PARAM_KEYS: frozenset[str] = frozenset(
    {
        # dialogue act
        "dialogue_act", "dialogue_act_confidence", "dialogue_act_source", "dialogue_act_regex",
        "dialogue_act_regex_confidence", "dialogue_act_llm_candidate", "dialogue_act_llm_confidence",
        "dialogue_act_llm_standalone_query", "dialogue_act_guard_applied", "dialogue_act_guard_reason",
        "standalone_query", "resolved_user_input",
        # policy, correction, guardrail, disambiguation
        "policy_decision", "skip_intent_resolution", "routing_decision", "skip_schema_extraction",
        "correction_applied", "correction_target_field", "guardrail_blocked", "guardrail_reason",
        "sanitized_user_text", "skip_tool_execution", "skip_pending_action_execution",
        "pending_action_disambiguation_required", "pending_action_runtime_status", "pending_action_result",
        # schema facts
        "missing_fields", "missing_field_options", "schema_field_details", "schema_description", "schema_id",
        "schema_complete", "schema_has_any_value",
        # tools and planner
        "tool_result", "tool_status", "mcp_action", "mcp_tool_code", "mcp_tool_args", "mcp_tool_group",
        "mcp_operation_tag", "mcp_observations", "mcp_final_answer", "mcp_status", "mcp_tool_execution_error",
        # rules, state graph, memory, intent agent
        "rule_phase", "rule_execution_source", "rule_execution_origin", "post_intent_rule",
        "state_graph_valid", "state_graph_soft_block", "state_graph_blocked", "memory_session_summary",
        "memory_recall", "reset_reason", "intent_scores", "intent_top3", "intent_collision_candidates", "followups",
        "intent_unmatched",
        # maps injected for templates (ConvEngine's reserved keys)
        "session", "context", "schema_json",
    }
)

TURN_PARAM_KEYS: frozenset[str] = REQUEST_PARAM_KEYS | ENGINE_PARAM_KEYS
"""Params that never carry over to the next turn."""

RESET_PARAM_KEYS: tuple[str, ...] = ("reset", "restart", "conversation_reset")


def caller_params(params: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A caller's params without the engine-computed keys, and the keys that were dropped."""
    dropped = sorted(k for k in params if k in ENGINE_PARAM_KEYS)
    return {k: v for k, v in params.items() if k not in ENGINE_PARAM_KEYS}, dropped


def persistent_params(params: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The params that carry over to the next turn: an allow-list of ``keys`` (the persisted params,
    the caller's and those a rule or task chose to keep), never a turn-only key."""
    return {k: params[k] for k in dict.fromkeys(keys) if k in params and k not in TURN_PARAM_KEYS}


def changed_params(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Params host code (a custom step or rule action) set or replaced: they persist like a rule's."""
    return {k: v for k, v in after.items() if k not in before or before[k] is not v}
