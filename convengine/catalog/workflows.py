"""Names of the workflow graph runtime: the ``ce_flow.kind`` values, the node types a workflow may hold,
the ones publish validation refuses, and the validation rules a refusal names (its audit stages are in
:mod:`convengine.catalog.stages`)."""

from __future__ import annotations

from convengine.catalog import flows as flow_vocab

KIND_FLOW = "flow"
"""A conversation flow (entered by intent matching, walked by the ``flow`` step)."""
KIND_WORKFLOW = "workflow"
"""A workflow graph (walked by the workflow runtime: triggers, agents, routers, tools, sub-workflows)."""
KINDS: frozenset[str] = frozenset({KIND_FLOW, KIND_WORKFLOW})

TRIGGER = "trigger"
ROOT_AGENT = "root_agent"
INSTRUCTION_AGENT = "instruction_agent"
TOOL = "tool"
WORKFLOW = "workflow"
AGENT = flow_vocab.AGENT
KNOWLEDGE = flow_vocab.KNOWLEDGE
ROUTER = flow_vocab.ROUTER
DECISION = flow_vocab.DECISION
END = flow_vocab.END

ENTRY_TYPES: frozenset[str] = frozenset({TRIGGER, ROOT_AGENT})
"""Where a workflow is entered (``ce_flow.entry_node``, else its only trigger or root agent)."""
AGENT_TYPES: frozenset[str] = frozenset({ROOT_AGENT, AGENT, INSTRUCTION_AGENT})
NODE_TYPES: frozenset[str] = frozenset({TRIGGER, ROOT_AGENT, AGENT, INSTRUCTION_AGENT, KNOWLEDGE, ROUTER, DECISION,
                                        TOOL, WORKFLOW, END})
ANSWERING_TYPES: frozenset[str] = AGENT_TYPES | {KNOWLEDGE, END}
"""A workflow must reach one of these from every entry (an answer or an end)."""
REFUSED_TYPES: frozenset[str] = frozenset({"script", "datastore", "set", "human", "parallel", "wait"})
"""Legacy node types this runtime does not run: publish validation refuses them by name."""

OUTCOMES: dict[str, frozenset[str]] = {
    KNOWLEDGE: flow_vocab.OUTCOMES[flow_vocab.KNOWLEDGE],
    TOOL: frozenset({flow_vocab.ERROR}),
    ROOT_AGENT: frozenset({flow_vocab.ERROR}),
    AGENT: frozenset({flow_vocab.ERROR}),
    INSTRUCTION_AGENT: frozenset({flow_vocab.ERROR}),
}
"""The outcomes an edge may name per node type (NULL outcome: the default edge)."""

# The rules a publish-validation refusal names (``rule: <name>`` in its reason).
RULE_UNSUPPORTED_TYPE = "unsupported-node-type"
RULE_UNKNOWN_TYPE = "unknown-node-type"
RULE_ENTRY = "entry"
RULE_REACHES_ANSWER = "reaches-agent-knowledge-or-end"
RULE_EDGE_TARGET = "edge-target"
RULE_OUTCOME = "edge-outcome"
RULE_EXPRESSION = "expression"
RULE_CONFIG = "node-config"
RULE_SUB_WORKFLOW = "sub-workflow"
RULE_NAME = "name"
