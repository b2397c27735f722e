"""Publish validation of flows, at load: every violation named with its flow, node and edge.

A flow is refused when a node is unreachable from its entry, a node can neither reach an end nor
wait for input, an edge points at a node that does not exist, a subflow names no flow, a flow calls
itself through subflows (directly or through others), a node's type is unknown or its configuration wrong (an
agent's ``model`` / ``temperature`` included), or a cycle can run without waiting for input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from jsonschema.exceptions import SchemaError

from convengine._internal.jsonschemas import checked_validator
from convengine._internal.model_names import model_problem
from convengine._internal.sandbox import refusal as sandbox_refusal
from convengine._internal.textmatch import PatternError, compile_regex
from convengine.catalog import flows as vocab
from convengine.catalog import workflows as wf_vocab
from convengine.catalog.errors import Violation
from convengine.config.flows import intent_of
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord, FlowRecord
from convengine.knowledge.store import filter_problem
from convengine.rules.expr import ExpressionError, compile_expression
from convengine.security.env_refs import DEFAULT_PACK_ENV_NAMES, refused_reason, refused_refs
from convengine.settings import HTTP_MAX_ATTEMPTS, HTTP_MAX_TIMEOUT_MS

NODE, EDGE, FLOW = "ce_flow_node", "ce_flow_edge", "ce_flow"
RESERVED_CHARS = ("|", ":")
"""Characters LangGraph reserves in node names (flows and their nodes become graph nodes)."""
# Config keys each node type needs.
REQUIRED: dict[str, tuple[str, ...]] = {
    vocab.ENTITY: ("variable", "prompt"),
    vocab.SET: ("variable",),
    vocab.SUBFLOW: ("flow",),
    vocab.SERVICE: ("service_id", "url"),
    vocab.PYTHON: ("code",),
    vocab.AGENT: ("instructions",),
}


@dataclass
class _Check:
    flows: dict[str, FlowRecord]
    nodes: dict[str, dict[str, FlowNodeRecord]]
    edges: dict[str, list[FlowEdgeRecord]]
    intents: set[str] | None = None
    python_sandbox: str = "strict"
    pack_env_names: Sequence[str] = DEFAULT_PACK_ENV_NAMES
    found: list[Violation] = field(default_factory=list)
    no_entry: set[str] = field(default_factory=set)
    """Flows entered only at their intent nodes (a subflow or the welcome flow needs one entry)."""
    others: set[str] = field(default_factory=set)
    """Enabled ``ce_flow`` rows of another kind (workflows): their nodes and edges are checked elsewhere."""

    def bad(self, table: str, row_id: object, column: str | None, reason: str) -> None:
        self.found.append(Violation(table, row_id, column, reason))


class FlowFindings(Protocol):
    """What the flow checks need from validate.Validation: the rows, and where violations go."""

    violations: list[Violation]

    def rows(self, table: str) -> Sequence[Any]: ...


def validate_flows(v: FlowFindings, labels: dict[str, dict[Any, str]], *, python_sandbox: str = "strict",
                   pack_env_names: Sequence[str] = DEFAULT_PACK_ENV_NAMES) -> None:
    """Check ce_flow / ce_flow_node / ce_flow_edge of a :class:`Validation`, adding its violations.

    ``python_sandbox`` is ``flows.python-sandbox``: under ``strict`` a python node is refused where
    this host cannot set up its sandbox. ``pack_env_names`` is ``security.pack_env_names``: a service
    node's ``${env:NAME}`` must name a variable it allows."""
    rows = [f for f in v.rows(FLOW) if f.enabled]
    flows = {f.flow_code: f for f in rows if f.kind == wf_vocab.KIND_FLOW}
    check = _Check(flows, {code: {} for code in flows}, {code: [] for code in flows},
                   {i.intent_code for i in v.rows("ce_intent") if i.enabled}, python_sandbox, pack_env_names,
                   others={f.flow_code for f in rows if f.kind != wf_vocab.KIND_FLOW})
    for f in rows:
        if f.kind not in wf_vocab.KINDS:
            check.bad(FLOW, f.flow_code, "kind", f"flow {f.flow_code}: kind must be one of "
                      f"{', '.join(sorted(wf_vocab.KINDS))} (got {f.kind[:40]!r})")
    for code in [c for c in flows if c.startswith("__") or any(ch in c for ch in RESERVED_CHARS)]:
        check.bad(FLOW, code, "flow_code", f"flow {code}: flow codes may not start with '__' nor contain "
                  f"{' or '.join(map(repr, RESERVED_CHARS))}")
    _index_nodes(check, v.rows(NODE))
    _index_edges(check, v.rows(EDGE))
    for code in flows:
        _check_flow(check, code)
    _subflow_cycles(check)
    v.violations.extend(replace(x, row_id=labels.get(x.table, {}).get(x.row_id, x.row_id)) for x in check.found)


def _index_nodes(c: _Check, rows: Iterable[FlowNodeRecord]) -> None:
    for node in rows:
        if not node.enabled or node.flow_code in c.others:
            continue
        where = f"flow {node.flow_code} node {node.node_id}"
        if node.flow_code not in c.flows:
            c.bad(NODE, node.flow_node_id, "flow_code", f"{where}: no enabled ce_flow row {node.flow_code!r}")
            continue
        if node.node_id in c.nodes[node.flow_code]:
            c.bad(NODE, node.flow_node_id, "node_id", f"{where}: duplicate node id")
            continue
        if node.node_id.startswith("__") or any(ch in node.node_id for ch in RESERVED_CHARS):
            c.bad(NODE, node.flow_node_id, "node_id",
                  f"{where}: node ids may not start with '__' nor contain {' or '.join(map(repr, RESERVED_CHARS))}")
            continue
        c.nodes[node.flow_code][node.node_id] = node
        _check_node(c, node, where)


def _check_node(c: _Check, node: FlowNodeRecord, where: str) -> None:
    if node.node_type not in vocab.NODE_TYPES:
        c.bad(NODE, node.flow_node_id, "node_type",
              f"{where}: unknown node type {node.node_type!r}; expected one of {', '.join(sorted(vocab.NODE_TYPES))}")
        return
    config = node.config if node.config is not None else {}
    if not isinstance(config, dict):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: config must be a JSON object")
        return
    missing = [k for k in REQUIRED.get(node.node_type, ()) if config.get(k) in (None, "")]
    if missing:
        c.bad(NODE, node.flow_node_id, "config", f"{where}: a {node.node_type} node needs {', '.join(missing)}")
    if node.node_type == vocab.SUBFLOW and config.get("flow") and config["flow"] not in c.flows:
        c.bad(NODE, node.flow_node_id, "config", f"{where}: subflow {config['flow']!r} does not exist (no enabled ce_flow row"
              + (" of kind flow: it is a workflow)" if config["flow"] in c.others else ")"))
    pattern = (config.get("capture") or {}).get("pattern") if isinstance(config.get("capture"), dict) else None
    if pattern:
        try:
            compile_regex(str(pattern))
        except PatternError as exc:
            c.bad(NODE, node.flow_node_id, "config", f"{where}: capture pattern does not compile: {exc}")
    if node.node_type == vocab.ENTITY and config.get("extract") not in (None, "", "llm"):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: extract must be 'llm' (got {config['extract']!r})")
    if node.node_type == vocab.ENTITY and "value_schema" in config:
        _value_schema(c, node, where, config["value_schema"])
    if node.node_type == vocab.SET and config.get("expression"):
        _expression(c, NODE, node.flow_node_id, "config", where, str(config["expression"]))
    if node.node_type == vocab.AGENT:
        _agent_options(c, node, where, config)
    if node.node_type == vocab.PYTHON and (refused := sandbox_refusal(c.python_sandbox)):
        c.bad(NODE, node.flow_node_id, "node_type", f"{where}: {refused}")
    if node.node_type == vocab.PYTHON:
        _python_limits(c, node, where, config)
    if node.node_type == vocab.SERVICE:
        _service_limits(c, node, where, config)
    if node.node_type == vocab.KNOWLEDGE:
        _query_from(c, node, where, config.get("query_from"))
        for reason in knowledge_option_problems(config):
            c.bad(NODE, node.flow_node_id, "config", f"{where}: {reason}")


def knowledge_option_problems(config: dict[str, Any]) -> list[str]:
    """What is wrong with a knowledge node's search options: ``top_k``, ``min_score``, ``where`` (metadata
    filters), ``fusion``, ``mmr``, ``dedupe`` and ``query_turns``."""
    found = []

    def number(name: str, low: float, high: float, whole: bool) -> None:
        value = config.get(name)
        kinds = (int,) if whole else (int, float)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high):
            found.append(f"{name} must be a {'whole number' if whole else 'number'} from {low:g} to {high:g} "
                         f"(got {str(value)[:40]!r})")

    number("top_k", 1, vocab.KNOWLEDGE_MAX_TOP_K, True)
    number("min_score", 0, 1, False)
    number("mmr", 0, 1, False)
    number("query_turns", 0, vocab.KNOWLEDGE_MAX_QUERY_TURNS, True)
    if config.get("fusion") is not None and config["fusion"] not in vocab.KNOWLEDGE_FUSIONS:
        found.append(f"fusion must be one of {', '.join(vocab.KNOWLEDGE_FUSIONS)} (got {str(config['fusion'])[:40]!r})")
    if config.get("dedupe") is not None and not isinstance(config["dedupe"], bool):
        found.append(f"dedupe must be true or false (got {str(config['dedupe'])[:40]!r})")
    if config.get("where") is not None and (problem := filter_problem(config["where"])):
        found.append(f"where: {problem}")
    return found


def _query_from(c: _Check, node: FlowNodeRecord, where: str, value: object) -> None:
    """A knowledge node's ``query_from``: one of :data:`vocab.QUERY_SOURCES`, or a list of them."""
    parts = value if isinstance(value, list) else [value]
    if value is not None and (not parts or not all(isinstance(p, str) and p in vocab.QUERY_SOURCES for p in parts)):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: query_from must be one of "
              f"{', '.join(vocab.QUERY_SOURCES)} or a list of them (got {str(value)[:60]!r})")


def _service_limits(c: _Check, node: FlowNodeRecord, where: str, config: dict[str, Any]) -> None:
    """A service node's ``retries`` and ``timeout_ms``: whole numbers within the HTTP client's bounds, so a
    host answering 503 (or nothing) cannot hold the turn."""
    for field_path, name in refused_refs(config, "config", c.pack_env_names):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: {field_path}: {refused_reason(name)}")
    for name, low, high in (("retries", 0, HTTP_MAX_ATTEMPTS - 1), ("timeout_ms", 1, HTTP_MAX_TIMEOUT_MS)):
        value = config.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            c.bad(NODE, node.flow_node_id, "config",
                  f"{where}: {name} must be a whole number from {low} to {high} (got {str(value)[:40]!r})")


def _python_limits(c: _Check, node: FlowNodeRecord, where: str, config: dict[str, Any]) -> None:
    """A python node's ``timeout_s`` and ``memory_mb`` may lower the server's limits, never lift them past
    their bounds; anything but a positive finite number within them is refused."""
    for name, high in (("timeout_s", vocab.PYTHON_MAX_TIMEOUT_S), ("memory_mb", vocab.PYTHON_MAX_MEMORY_MB)):
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
            c.bad(NODE, node.flow_node_id, "config",
                  f"{where}: {name} must be a number above 0 and at most {high:g} (got {str(value)[:40]!r})")


def _agent_options(c: _Check, node: FlowNodeRecord, where: str, config: dict[str, Any]) -> None:
    """An agent's ``model``: a non-empty name of bounded length; ``temperature``: a number in range;
    ``max_steps``: a count within :data:`vocab.AGENT_MAX_STEPS`."""
    model, temperature = config.get("model"), config.get("temperature")
    if model is not None and (not isinstance(model, str) or not model.strip()
                              or len(model) > vocab.AGENT_MODEL_MAX_CHARS):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: model must be a non-empty model name of at most "
              f"{vocab.AGENT_MODEL_MAX_CHARS} characters (got {str(model)[:40]!r})")
    elif model is not None and (problem := model_problem(model)):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: model {problem}")
    tools = config.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) and t.strip() for t in tools)
                              or len(tools) > vocab.AGENT_MAX_TOOLS):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: tools must be a list of at most {vocab.AGENT_MAX_TOOLS} "
              f"tool codes (got {str(tools)[:60]!r})")
    low, high = vocab.AGENT_TEMPERATURE_MIN, vocab.AGENT_TEMPERATURE_MAX
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                    or not low <= temperature <= high):
        c.bad(NODE, node.flow_node_id, "config",
              f"{where}: temperature must be a number from {low:g} to {high:g} (got {str(temperature)[:40]!r})")
    steps = config.get("max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or not 1 <= steps <= vocab.AGENT_MAX_STEPS):
        c.bad(NODE, node.flow_node_id, "config", f"{where}: max_steps must be a whole number from 1 to "
              f"{vocab.AGENT_MAX_STEPS} (got {str(steps)[:40]!r}): each step is a planner call the LLM asks for")


def _value_schema(c: _Check, node: FlowNodeRecord, where: str, schema: object) -> None:
    try:
        if not isinstance(schema, dict):
            raise SchemaError("it must be a JSON object")
        checked_validator(schema)
    except SchemaError as exc:
        c.bad(NODE, node.flow_node_id, "config", f"{where}: value_schema is not a valid JSON Schema: {exc.message}")


def _expression(c: _Check, table: str, row_id: object, column: str, where: str, source: str) -> None:
    try:
        compile_expression(source)
    except ExpressionError as exc:
        c.bad(table, row_id, column, f"{where}: expression {source[:80]!r} is not valid: {exc}")


def _index_edges(c: _Check, rows: Iterable[FlowEdgeRecord]) -> None:
    for edge in rows:
        if not edge.enabled or edge.flow_code in c.others:
            continue
        where = f"flow {edge.flow_code} edge {edge.from_node}->{edge.to_node}"
        if edge.flow_code not in c.flows:
            c.bad(EDGE, edge.flow_edge_id, "flow_code", f"{where}: no enabled ce_flow row {edge.flow_code!r}")
            continue
        nodes = c.nodes[edge.flow_code]
        ok = True
        for column, target in (("from_node", edge.from_node), ("to_node", edge.to_node)):
            if target not in nodes:
                c.bad(EDGE, edge.flow_edge_id, column, f"{where}: points at node {target!r}, which does not exist")
                ok = False
        if edge.condition:
            _expression(c, EDGE, edge.flow_edge_id, "condition", where, edge.condition)
        if ok and edge.outcome:
            kind = nodes[edge.from_node].node_type
            allowed = vocab.OUTCOMES.get(kind, frozenset())
            if edge.outcome not in allowed:
                c.bad(EDGE, edge.flow_edge_id, "outcome", f"{where}: a {kind} node has no outcome {edge.outcome!r}"
                      + (f" (it has {', '.join(sorted(allowed))})" if allowed else ""))
                ok = False
        if ok:
            c.edges[edge.flow_code].append(edge)


def _entries(c: _Check, code: str) -> set[str] | None:
    """The flow's entry (``entry_node``, else its only ``start``, else its only ``intent`` node) and
    every ``intent`` node naming an intent; None (and a violation) when it has none."""
    record, nodes = c.flows[code], c.nodes[code]
    intents = {n for n, r in nodes.items() if intent_of(r)}
    entry = record.entry_node
    if entry is not None and entry not in nodes:
        c.bad(FLOW, code, "entry_node", f"flow {code}: entry node {entry!r} does not exist")
        return None
    if entry is None:
        starts = [n for n, r in nodes.items() if r.node_type == vocab.START]
        candidates = starts or [n for n, r in nodes.items() if r.node_type == vocab.INTENT]
        if len(candidates) == 1:
            entry = candidates[0]
        elif intents and not starts:
            c.no_entry.add(code)
            if record.intent_code:
                c.bad(FLOW, code, "intent_code", f"flow {code}: intent {record.intent_code} enters the flow at its "
                      "entry, but it has none (no start node nor entry_node; it has several intent nodes)")
        else:
            c.bad(FLOW, code, "entry_node", f"flow {code}: needs exactly one start node, an entry_node or intent "
                  f"nodes naming their intent (found {len(starts)} start nodes)")
            return None
    return intents | ({entry} if entry else set())


def _intent_nodes(c: _Check, code: str, known: set[str] | None) -> None:
    """An ``intent`` node's ``config.intent`` names an enabled intent, once per flow."""
    seen: dict[str, str] = {}
    for node_id, node in sorted(c.nodes[code].items()):
        intent = intent_of(node)
        if intent is None:
            continue
        where = f"flow {code} node {node_id}"
        if known is not None and intent not in known:
            c.bad(NODE, node.flow_node_id, "config", f"{where}: intent {intent!r} is not an enabled ce_intent")
        if intent in seen:
            c.bad(NODE, node.flow_node_id, "config", f"{where}: intent {intent!r} already enters this flow at "
                  f"node {seen[intent]}")
        seen.setdefault(intent, node_id)


def _check_flow(c: _Check, code: str) -> None:
    nodes, edges = c.nodes[code], c.edges[code]
    _intent_nodes(c, code, c.intents)
    entries = _entries(c, code)
    if entries is None:
        return
    entry = ", ".join(sorted(entries))
    succ: dict[str, list[FlowEdgeRecord]] = {n: [] for n in nodes}
    for edge in edges:
        succ[edge.from_node].append(edge)
    reached = _reach(entries, {n: [e.to_node for e in out] for n, out in succ.items()})
    for node_id in sorted(set(nodes) - reached):
        c.bad(NODE, nodes[node_id].flow_node_id, "node_id", f"flow {code} node {node_id}: unreachable from entry {entry}")
    waits = {n for n, r in nodes.items() if _waits(c, r)}
    terminals = waits | {n for n, r in nodes.items() if r.node_type == vocab.END}
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in edges:
        preds[edge.to_node].append(edge.from_node)
    finishing = _reach(terminals, preds)
    for node_id in sorted(reached - finishing):
        c.bad(NODE, nodes[node_id].flow_node_id, "node_id",
              f"flow {code} node {node_id}: no path from here reaches an end node or waits for input")
    _cycles(c, code, {e.flow_edge_id: e for e in edges if e.from_node in reached and e.from_node not in waits
                      and e.to_node not in waits})


def _waits(c: _Check, node: FlowNodeRecord) -> bool:
    """Whether running the node can stop the walk for input (entity, handoff, a subflow that can)."""
    if node.node_type in (vocab.ENTITY, vocab.HANDOFF):
        return True
    if node.node_type == vocab.AGENT:
        return bool((node.config or {}).get("greeting") or (node.config or {}).get("stay"))
    if node.node_type == vocab.SUBFLOW:
        called = (node.config or {}).get("flow")
        return any(r.node_type in (vocab.ENTITY, vocab.HANDOFF) for r in c.nodes.get(str(called), {}).values())
    return False


def _reach(start: set[str], graph: dict[str, list[str]]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _cycles(c: _Check, code: str, edges: dict[int, FlowEdgeRecord]) -> None:
    """Report one closing edge per cycle among nodes that never wait (depth-first search)."""
    out: dict[str, list[FlowEdgeRecord]] = {}
    for edge in edges.values():
        out.setdefault(edge.from_node, []).append(edge)
    colour: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        colour[node] = 1
        path.append(node)
        for edge in out.get(node, ()):
            state = colour.get(edge.to_node, 0)
            if state == 1:
                loop = path[path.index(edge.to_node):] + [edge.to_node]
                c.bad(EDGE, edge.flow_edge_id, "to_node",
                      f"flow {code} edge {edge.from_node}->{edge.to_node}: closes a cycle ({' -> '.join(loop)}) "
                      "that can run without waiting for input")
            elif state == 0:
                visit(edge.to_node)
        path.pop()
        colour[node] = 2

    for node in sorted(out):
        if colour.get(node, 0) == 0:
            visit(node)


def _subflow_cycles(c: _Check) -> None:
    """Refuse recursive subflows: one violation per call cycle, on the ``subflow`` node closing it
    (named with the edge that reaches that node)."""
    calls: dict[str, list[FlowNodeRecord]] = {code: [] for code in c.flows}
    for code, nodes in c.nodes.items():
        calls[code] = sorted((n for n in nodes.values() if n.node_type == vocab.SUBFLOW
                              and isinstance(n.config, dict) and n.config.get("flow") in c.flows),
                             key=lambda n: n.node_id)
    for code in sorted(calls):
        for node in calls[code]:
            called = str(node.config["flow"])
            if called in c.no_entry:
                c.bad(NODE, node.flow_node_id, "config", f"flow {code} node {node.node_id}: subflow {called!r} "
                      "has no single entry (a start node or entry_node); it is entered only at its intent nodes")
    for code, node, called, loop in call_cycles(calls, "flow"):
        into = [f"{e.from_node}->{e.to_node}" for e in c.edges[code] if e.to_node == node.node_id]
        c.bad(NODE, node.flow_node_id, "config",
              f"flow {code} node {node.node_id}: subflow {called!r} closes a subflow cycle ({loop})"
              + (f" entered by edge {', '.join(into)}" if into else "")
              + "; a flow may not call itself, directly or through other flows")


def call_cycles(calls: Mapping[str, Sequence[FlowNodeRecord]],
                key: str) -> Iterator[tuple[str, FlowNodeRecord, str, str]]:
    """Each call closing a cycle in ``calls`` (caller code -> its calling nodes, whose ``config[key]``
    names the callee): the caller, the node, the callee and the loop as ``A -> B -> A``; depth first, in
    code order, so a cycle is reported once, on the call that closes it."""
    colour: dict[str, int] = {}
    path: list[str] = []

    def visit(code: str) -> Iterator[tuple[str, FlowNodeRecord, str, str]]:
        colour[code] = 1
        path.append(code)
        for node in calls.get(code, ()):
            called = str(node.config[key])
            if colour.get(called, 0) == 1:
                yield code, node, called, " -> ".join([*path[path.index(called):], called])
            elif colour.get(called, 0) == 0:
                yield from visit(called)
        path.pop()
        colour[code] = 2

    for code in sorted(calls):
        if colour.get(code, 0) == 0:
            yield from visit(code)
