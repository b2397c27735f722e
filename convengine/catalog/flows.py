"""Names of the flow runtime: node types, outcomes, walk modes, audit stages, event names."""

from __future__ import annotations

from convengine.catalog import stages

START = "start"
END = "end"
INTENT = "intent"
MESSAGE = "message"
ENTITY = "entity"
DECISION = "decision"
ROUTER = "router"
SET = "set"
FALLBACK = "fallback"
SUBFLOW = "subflow"
HANDOFF = "handoff"
SERVICE = "service"
PYTHON = "python"
KNOWLEDGE = "knowledge"
AGENT = "agent"

NODE_TYPES: frozenset[str] = frozenset(
    {START, END, INTENT, MESSAGE, ENTITY, DECISION, ROUTER, SET, FALLBACK, SUBFLOW, HANDOFF, SERVICE, PYTHON,
     KNOWLEDGE, AGENT})
WAITING_TYPES: frozenset[str] = frozenset({ENTITY, AGENT})
"""Node types that may stop the walk to wait for the user's next message."""
BRANCHING_TYPES: frozenset[str] = frozenset({DECISION, ROUTER})

# An agent node's own LLM options (checked at load).
AGENT_MODEL_MAX_CHARS = 200
AGENT_TEMPERATURE_MIN, AGENT_TEMPERATURE_MAX = 0.0, 2.0
AGENT_DEFAULT_STEPS, AGENT_MAX_STEPS = 4, 32
"""Planner calls an agent node makes per turn: its ``max_steps`` (the LLM decides whether the loop goes on)."""
KNOWLEDGE_MAX_TOP_K = 20
"""Most passages a knowledge node fetches (its ``top_k``, like ``knowledge.fallback.top_k``)."""
PYTHON_MAX_TIMEOUT_S = 60.0
"""The longest a python node's script may run (its ``timeout_s``, ``flows.python-timeout-s``)."""
PYTHON_MAX_MEMORY_MB = 8192
"""The largest address space a python node's script may have (its ``memory_mb``, ``flows.python-memory-mb``)."""

# Outcomes a node reports; an edge with that ``outcome`` is taken (NULL outcome: the default edge).
CAPTURED = "captured"
ESCALATE = "escalate"
FOUND = "found"
NOT_FOUND = "not_found"
ERROR = "error"
OUTCOMES: dict[str, frozenset[str]] = {
    ENTITY: frozenset({CAPTURED, ESCALATE}),
    KNOWLEDGE: frozenset({FOUND, NOT_FOUND}),
    SERVICE: frozenset({ERROR}),
    PYTHON: frozenset({ERROR}),
    AGENT: frozenset({ERROR}),
}

# How the walk enters the node it stopped at.
MODE_ENTER = "enter"      # run the node from the start
MODE_WAIT = "wait"        # the node waits for input: this turn's message is its answer
MODE_RETURN = "return"    # a subflow returned / a handoff ended: follow the node's default edge
MODE_REASK = "reask"      # a digression returned: ask the node's question again

# Turn events (not user messages) that start or continue a flow.
EVENT_WELCOME = "welcome"
EVENT_HANDOFF_RESUME = "handoff_resume"

HANDOFF_STATUS = "HANDOFF"

# Audit stages
FLOW_STARTED = stages.FLOW_STARTED
FLOW_NODE = stages.FLOW_NODE
FLOW_WAITING = stages.FLOW_WAITING
FLOW_DIGRESSION = stages.FLOW_DIGRESSION
FLOW_RETURNED = stages.FLOW_RETURNED
FLOW_COMPLETED = stages.FLOW_COMPLETED
FLOW_SUBFLOW_CALL = stages.FLOW_SUBFLOW_CALL
FLOW_ENTITY_CAPTURED = stages.FLOW_ENTITY_CAPTURED
FLOW_ENTITY_REPROMPT = stages.FLOW_ENTITY_REPROMPT
FLOW_ENTITY_ESCALATED = stages.FLOW_ENTITY_ESCALATED
FLOW_ENTITY_LLM_EXTRACTED = stages.FLOW_ENTITY_LLM_EXTRACTED
FLOW_ENTITY_LLM_SKIPPED = stages.FLOW_ENTITY_LLM_SKIPPED
FLOW_VARIABLE_SET = stages.FLOW_VARIABLE_SET
FLOW_SERVICE_CALLED = stages.FLOW_SERVICE_CALLED
FLOW_SERVICE_FAILED = stages.FLOW_SERVICE_FAILED
FLOW_SCRIPT_RAN = stages.FLOW_SCRIPT_RAN
FLOW_SCRIPT_FAILED = stages.FLOW_SCRIPT_FAILED
FLOW_KNOWLEDGE = stages.FLOW_KNOWLEDGE
FLOW_AGENT_ANSWERED = stages.FLOW_AGENT_ANSWERED
FLOW_AGENT_TOOL = stages.FLOW_AGENT_TOOL
FLOW_AGENT_FAILED = stages.FLOW_AGENT_FAILED
FLOW_HANDOFF = stages.FLOW_HANDOFF
FLOW_HANDOFF_MESSAGE = stages.FLOW_HANDOFF_MESSAGE
FLOW_HANDOFF_RESUMED = stages.FLOW_HANDOFF_RESUMED
FLOW_STEP_LIMIT = stages.FLOW_STEP_LIMIT
FLOW_RESET = stages.FLOW_RESET
INTENT_SMALL_TALK_MATCHED = stages.INTENT_SMALL_TALK_MATCHED
