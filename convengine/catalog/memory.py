"""Names the memory features use: audit stages, lifecycle states, what counts as a side effect."""

from __future__ import annotations

import enum

from convengine.catalog import stages

UNDO_STAGE = stages.UNDO
REDO_STAGE = stages.REDO
UNDO_REFUSED_STAGE = stages.UNDO_REFUSED

UNDO_METADATA_KEY = "convengine_undo"
"""Checkpoint metadata of an undo/redo checkpoint: kind, before, forward, depth."""
TURN_METADATA_KEY = "convengine_turn"
"""Checkpoint metadata naming the turn whose state the checkpoint holds (set by the runtime)."""


class Lifecycle(str, enum.Enum):
    """The conversation's lifecycle, next to ConvEngine's ``status`` (RUNNING / BLOCKED)."""

    READY = "READY"
    """Created (seeded) but no turn completed yet."""
    IN_PROGRESS = "IN_PROGRESS"
    ENDED = "ENDED"
    """A pack ended it (``conversation_memory.end_states``); only a reset starts it again."""
    INTERRUPTED = "INTERRUPTED"
    """Its last turn failed; the conversation is as the turn before left it."""


LIFECYCLE_STATES: tuple[str, ...] = tuple(s.value for s in Lifecycle)

# Stages that mean the turn did something outside the engine: a task ran, a tool was called, a
# container provider was asked. Undo cannot take these back.
SIDE_EFFECT_STAGES: frozenset[str] = frozenset({
    "SET_TASK", stages.SET_TASK_FAILED, stages.PENDING_ACTION_EXECUTED, stages.PENDING_ACTION_FAILED,
    stages.TOOL_ORCHESTRATION_RESULT, stages.TOOL_ORCHESTRATION_ERROR, stages.MCP_TOOL_RESULT, stages.MCP_TOOL_ERROR,
    stages.CONTAINER_DATA_EXECUTED, stages.CONTAINER_DATA_FAILED,
})

# Stages whose payload is data a step produced (tool results, LLM outputs, extracted values).
DATA_STAGES: frozenset[str] = frozenset({
    stages.TOOL_ORCHESTRATION_RESULT, stages.MCP_TOOL_RESULT, stages.CONTAINER_DATA_ATTACHED, stages.SCHEMA_STATUS,
    stages.MCP_FINAL_ANSWER, stages.PENDING_ACTION_EXECUTED,
})
DATA_STAGE_SUFFIX = "_LLM_OUTPUT"

ACTION_STAGE = stages.RULE_APPLIED

# What analytics counts of a turn (ce_conversation_step's stats columns, written with the row).
FALLBACK_STAGES: frozenset[str] = frozenset({
    stages.INTENT_MISSING, stages.KNOWLEDGE_FALLBACK_ANSWERED, stages.KNOWLEDGE_FALLBACK_NO_MATCH,
})
"""A turn is a fallback when one of these was emitted (nothing resolved an intent, the knowledge
fallback answered or found nothing), a flow ``fallback`` node ran (``FLOW_NODE`` of that type), or
:data:`UNMATCHED_STAGE` was emitted and the turn ended in ``UNKNOWN``."""
UNMATCHED_STAGE = stages.INTENT_RESOLVE_NO_CHANGE
"""No classifier or agent recognised the message: a fallback when the turn also ends in ``UNKNOWN``."""
HANDOFF_STAGE = stages.FLOW_HANDOFF
"""The turn handed the conversation to a person (a ``handoff`` node or a ``HANDOFF`` rule action)."""
LLM_CALL_STAGE = stages.LLM_CALL
"""One model call that returned, with its model and token usage."""

