"""Names of the flow runtime: node types, outcomes, walk modes, event names (its audit stages are in
:mod:`convengine.catalog.stages`)."""

from __future__ import annotations

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
AGENT_MAX_TOOLS = 64
"""Tools one agent node may declare."""
QUERY_TEMPLATE, QUERY_MESSAGE, QUERY_SUMMARY = "template", "message", "summary"
QUERY_SOURCES = (QUERY_TEMPLATE, QUERY_MESSAGE, QUERY_SUMMARY)
"""What a knowledge node's query is built from (its ``query_from``)."""
KNOWLEDGE_QUERY_MAX_CHARS = 1000
KNOWLEDGE_MAX_TOP_K = 20
"""Most passages a knowledge node fetches (its ``top_k``, like ``knowledge.fallback.top_k``)."""
KNOWLEDGE_MAX_QUERY_TURNS = 10
"""Earlier user messages a knowledge node's ``query_turns`` may add (as ``knowledge.fallback.query_turns``)."""
KNOWLEDGE_FUSIONS = ("weighted", "rrf")
"""A knowledge node's ``fusion`` (as ``knowledge.fusion``)."""
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
