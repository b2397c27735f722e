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

import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Final

from typing_extensions import TypedDict

from convengine.catalog import params as param_keys


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


class ConversationState(TypedDict, total=False):
    """Conversation-scoped keys: they survive between turns."""

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
    workflow: dict[str, Any]
    """The workflow graph runtime's position, shaped like ``flow``: call ``stack`` (workflow, node,
    mode), ``vars`` (session.*) (see convengine.workflows)."""


class TurnState(TypedDict, total=False):
    """Turn-scoped keys: reset at the start of every turn."""

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


class EngineState(ConversationState, TurnState, total=False):
    """What the checkpointer carries: the conversation's keys and this turn's."""


# The state's keys by name (the values are the TypedDicts' keys; tests/test_catalogues.py checks they match).
# Final: mypy reads each as its literal, so ``final.get(keys.TURN)`` on an EngineState is typed ``int | None``.
CONVERSATION_ID: Final = "conversation_id"
STATUS: Final = "status"
INTENT: Final = "intent"
STATE: Final = "state"
CONTEXT: Final = "context"
INPUT_PARAMS: Final = "input_params"
TURN: Final = "turn"
RECENT_TURNS: Final = "recent_turns"
SCHEMA_SCOPE: Final = "schema_scope"
FLOW: Final = "flow"
WORKFLOW: Final = "workflow"
TURN_INPUT: Final = "turn_input"
USER_TEXT: Final = "user_text"
STANDALONE_QUERY: Final = "standalone_query"
PARAMS: Final = "params"
TURN_START: Final = "turn_start"
SCHEMA_FACTS: Final = "schema_facts"
TRANSITIONS: Final = "transitions"
PAYLOAD: Final = "payload"
MCP_LOOP: Final = "mcp_loop"
LAST_LLM: Final = "last_llm"
KEPT_PARAMS: Final = "kept_params"
NEW_CONVERSATION: Final = "new_conversation"
PERSISTED: Final = "persisted"
REPLY: Final = "reply"

CONVERSATION_KEYS: tuple[str, ...] = tuple(ConversationState.__annotations__)
TURN_KEYS: tuple[str, ...] = tuple(TurnState.__annotations__)


def turn_defaults() -> dict[str, Any]:
    """Fresh values for every turn-scoped key (the input key is kept by the caller)."""
    return {
        USER_TEXT: "",
        STANDALONE_QUERY: None,
        PARAMS: {},
        TURN_START: {},
        SCHEMA_FACTS: {},
        TRANSITIONS: [],
        PAYLOAD: None,
        MCP_LOOP: {},
        LAST_LLM: {},
        KEPT_PARAMS: [],
        NEW_CONVERSATION: False,
        PERSISTED: False,
        REPLY: None,
    }


REQUEST_PARAM_KEYS: frozenset[str] = param_keys.REQUEST_PARAM_KEYS
ENGINE_PARAM_KEYS: frozenset[str] = param_keys.ENGINE_PARAM_KEYS
RESET_PARAM_KEYS: tuple[str, ...] = param_keys.RESET_PARAM_KEYS
TURN_PARAM_KEYS: frozenset[str] = REQUEST_PARAM_KEYS | ENGINE_PARAM_KEYS
"""Params that never carry over to the next turn."""


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


# --- what a stored checkpoint may hold ------------------------------------------------------

MAX_STORED_INT = 2**31
"""Largest ``turn`` a stored state may hold (an INTEGER column's range)."""


def _accepted(hint: object) -> tuple[type, ...]:
    """The runtime types a key's annotation allows (its top level: ``dict[str, Any] | None`` -> dict, None)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for arg in typing.get_args(hint) for t in _accepted(arg))
    if hint is type(None):
        return (type(None),)
    return (typing.cast(type, typing.get_origin(hint) or hint),)  # a class: EngineState's hints are plain


_STORED_TYPES: dict[str, tuple[type, ...]] = {
    key: _accepted(hint) for key, hint in typing.get_type_hints(EngineState).items()}


def stored_state_problem(values: Mapping[str, Any]) -> str | None:
    """What is wrong with checkpointed channel values (read back from storage, so untrusted), or None:
    a key of the engine's state holding another type than it is declared with, or a turn out of range."""
    for key, value in values.items():
        accepted = _STORED_TYPES.get(key)
        if accepted is None or value is None:  # None is read as "not set" everywhere
            continue
        if not isinstance(value, accepted) or isinstance(value, bool) and bool not in accepted:
            return f"a {key!r} of type {type(value).__name__}"
        if key == TURN and isinstance(value, int) and not 0 <= value <= MAX_STORED_INT:
            return f"a turn of {value}"
        if isinstance(value, list) and key in (RECENT_TURNS, TRANSITIONS) and \
                not all(isinstance(item, dict) for item in value):
            return f"a {key!r} holding something other than objects"
    return None
