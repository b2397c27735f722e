"""Publish validation of workflow graphs (``ce_flow`` rows of kind ``workflow``), at load.

Every refusal names the workflow, the node (or edge) and the rule it breaks (``rule: <name>``, the
names in :mod:`convengine.catalog.workflows`): a node type the workflow runtime does not run
(``script``, ``datastore``, ``set``, ``human``, ``parallel``, ``wait``) or does not know, no single
entry, an entry from which no agent, knowledge or end node can be reached, an edge to a missing node,
an outcome its source cannot report, an expression that does not parse, a node's missing or wrong
configuration, and a sub-workflow that is not an enabled workflow or that calls its caller back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from convengine.catalog import workflows as vocab
from convengine.catalog.errors import Violation
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord, FlowRecord
from convengine.config_loader import flow_checks
from convengine.config_loader.flow_checks import EDGE, FLOW, NODE, RESERVED_CHARS, FlowFindings, call_cycles
from convengine.rules.expr import ExpressionError, compile_expression

REQUIRED: dict[str, tuple[str, ...]] = {
    vocab.TOOL: ("tool",),
    vocab.WORKFLOW: ("workflow",),
    vocab.AGENT: ("instructions",),
    vocab.INSTRUCTION_AGENT: ("instructions",),
    vocab.ROOT_AGENT: ("instructions",),
}
"""Config keys each workflow node type needs."""


@dataclass
class _Check:
    workflows: dict[str, FlowRecord]
    nodes: dict[str, dict[str, FlowNodeRecord]] = field(default_factory=dict)
    edges: dict[str, list[FlowEdgeRecord]] = field(default_factory=dict)
    found: list[Violation] = field(default_factory=list)

    def bad(self, table: str, row_id: object, column: str | None, where: str, reason: str, rule: str) -> None:
        self.found.append(Violation(table, row_id, column, f"{where}: {reason} (rule: {rule})"))


def validate_workflows(v: FlowFindings, labels: dict[str, dict[Any, str]], *, root: str | None = None) -> None:
    """Check the workflow graphs of a :class:`Validation`, adding its violations; ``root`` is the setting
    ``flows.root-workflow``, which must name one of them."""
    workflows = {f.flow_code: f for f in v.rows(FLOW) if f.enabled and f.kind == vocab.KIND_WORKFLOW}
    if root is not None and root not in workflows:
        v.violations.append(Violation("settings", "flows.root-workflow", None, f"root workflow {root[:80]!r} is not "
                                      f"an enabled ce_flow row of kind workflow (rule: {vocab.RULE_ENTRY})"))
    if not workflows:
        return
    check = _Check(workflows, {code: {} for code in workflows}, {code: [] for code in workflows})
    for code in workflows:
        if code.startswith("__") or any(ch in code for ch in RESERVED_CHARS):
            check.bad(FLOW, code, "flow_code", f"workflow {code}", "a workflow code may not start with '__' nor "
                      f"contain {' or '.join(map(repr, RESERVED_CHARS))}", vocab.RULE_NAME)
    for node in v.rows(NODE):
        if node.enabled and node.flow_code in workflows:
            _node(check, node)
    for edge in v.rows(EDGE):
        if edge.enabled and edge.flow_code in workflows:
            _edge(check, edge)
    for code in sorted(workflows):
        _reachability(check, code)
    _call_cycles(check)
    v.violations.extend(replace(x, row_id=labels.get(x.table, {}).get(x.row_id, x.row_id)) for x in check.found)


def _node(c: _Check, node: FlowNodeRecord) -> None:
    where = f"workflow {node.flow_code} node {node.node_id}"
    nodes = c.nodes[node.flow_code]
    if node.node_id in nodes:
        c.bad(NODE, node.flow_node_id, "node_id", where, "duplicate node id", vocab.RULE_NAME)
        return
    if node.node_id.startswith("__") or any(ch in node.node_id for ch in RESERVED_CHARS):
        c.bad(NODE, node.flow_node_id, "node_id", where, "a node id may not start with '__' nor contain "
              f"{' or '.join(map(repr, RESERVED_CHARS))}", vocab.RULE_NAME)
        return
    nodes[node.node_id] = node
    if node.node_type in vocab.REFUSED_TYPES:
        c.bad(NODE, node.flow_node_id, "node_type", where, f"node type {node.node_type!r} is not run by the "
              f"workflow runtime (refused: {', '.join(sorted(vocab.REFUSED_TYPES))})", vocab.RULE_UNSUPPORTED_TYPE)
        return
    if node.node_type not in vocab.NODE_TYPES:
        c.bad(NODE, node.flow_node_id, "node_type", where, f"unknown node type {node.node_type!r}; expected one "
              f"of {', '.join(sorted(vocab.NODE_TYPES))}", vocab.RULE_UNKNOWN_TYPE)
        return
    config = node.config if node.config is not None else {}
    if not isinstance(config, dict):
        c.bad(NODE, node.flow_node_id, "config", where, "config must be a JSON object", vocab.RULE_CONFIG)
        return
    missing = [k for k in REQUIRED.get(node.node_type, ()) if config.get(k) in (None, "")]
    if missing:
        c.bad(NODE, node.flow_node_id, "config", where, f"a {node.node_type} node needs {', '.join(missing)}",
              vocab.RULE_CONFIG)
    called = config.get("workflow") if node.node_type == vocab.WORKFLOW else None
    if called and called not in c.workflows:
        c.bad(NODE, node.flow_node_id, "config", where, f"sub-workflow {str(called)[:80]!r} is not an enabled "
              "ce_flow row of kind workflow", vocab.RULE_SUB_WORKFLOW)
    if node.node_type in vocab.AGENT_TYPES:
        _agent_options(c, node, where, config)
    if node.node_type == vocab.KNOWLEDGE:
        for reason in flow_checks.knowledge_option_problems(config):
            c.bad(NODE, node.flow_node_id, "config", where, reason, vocab.RULE_CONFIG)


def _agent_options(c: _Check, node: FlowNodeRecord, where: str, config: dict[str, Any]) -> None:
    """An agent's ``model``, ``temperature`` and ``max_steps``: the flows' agent checks, reported here."""
    probe = flow_checks._Check({}, {}, {})
    flow_checks._agent_options(probe, node, where, config)
    for found in probe.found:
        reason = found.reason.removeprefix(f"{where}: ")
        c.bad(NODE, node.flow_node_id, found.column, where, reason, vocab.RULE_CONFIG)


def _edge(c: _Check, edge: FlowEdgeRecord) -> None:
    where = f"workflow {edge.flow_code} edge {edge.from_node}->{edge.to_node}"
    nodes = c.nodes[edge.flow_code]
    ok = True
    for column, target in (("from_node", edge.from_node), ("to_node", edge.to_node)):
        if target not in nodes:
            c.bad(EDGE, edge.flow_edge_id, column, where, f"points at node {target!r}, which does not exist",
                  vocab.RULE_EDGE_TARGET)
            ok = False
    if edge.condition:
        try:
            compile_expression(edge.condition)
        except ExpressionError as exc:
            c.bad(EDGE, edge.flow_edge_id, "condition", where, f"condition.expr {edge.condition[:80]!r} is not "
                  f"valid: {exc}", vocab.RULE_EXPRESSION)
            ok = False
    if ok and edge.outcome:
        kind = nodes[edge.from_node].node_type
        allowed = vocab.OUTCOMES.get(kind, frozenset())
        if edge.outcome not in allowed:
            c.bad(EDGE, edge.flow_edge_id, "outcome", where, f"a {kind} node has no outcome {edge.outcome!r}"
                  + (f" (it has {', '.join(sorted(allowed))})" if allowed else ""), vocab.RULE_OUTCOME)
            ok = False
    if ok:
        c.edges[edge.flow_code].append(edge)


def entries(record: FlowRecord, nodes: dict[str, FlowNodeRecord]) -> list[str]:
    """Every entry of a workflow: its ``entry_node`` and its triggers and root agents."""
    found = [n for n, r in sorted(nodes.items()) if r.node_type in vocab.ENTRY_TYPES]
    if record.entry_node and record.entry_node not in found:
        found.insert(0, record.entry_node)
    return found


def _reachability(c: _Check, code: str) -> None:
    record, nodes = c.workflows[code], c.nodes[code]
    starts = entries(record, nodes)
    if record.entry_node is not None and record.entry_node not in nodes:
        c.bad(FLOW, code, "entry_node", f"workflow {code}", f"entry node {record.entry_node!r} does not exist",
              vocab.RULE_ENTRY)
        return
    if not starts or (len(starts) > 1 and record.entry_node is None):
        c.bad(FLOW, code, "entry_node", f"workflow {code}", "needs one entry: a single trigger or root_agent node, "
              f"or entry_node naming where a conversation starts (found {len(starts)})", vocab.RULE_ENTRY)
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in c.edges[code]:
        succ[edge.from_node].append(edge.to_node)
    for start in starts:
        reached = _reach(start, succ)
        if not any(nodes[n].node_type in vocab.ANSWERING_TYPES for n in reached):
            c.bad(NODE, nodes[start].flow_node_id, "node_id", f"workflow {code} node {start}",
                  "no agent, knowledge or end node is reachable from this entry", vocab.RULE_REACHES_ANSWER)


def _reach(start: str, graph: dict[str, list[str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _call_cycles(c: _Check) -> None:
    """A workflow may not hand over to itself, directly or through other workflows."""
    calls: dict[str, list[FlowNodeRecord]] = {
        code: sorted((n for n in nodes.values() if n.node_type == vocab.WORKFLOW and isinstance(n.config, dict)
                      and n.config.get("workflow") in c.workflows), key=lambda n: n.node_id)
        for code, nodes in c.nodes.items()}
    for code, node, called, loop in call_cycles(calls, "workflow"):
        c.bad(NODE, node.flow_node_id, "config", f"workflow {code} node {node.node_id}",
              f"sub-workflow {called!r} closes a call cycle ({loop})", vocab.RULE_SUB_WORKFLOW)

