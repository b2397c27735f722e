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
