"""Graphs drawn as SVG on the server: the state graph of the configuration, the turn graph and the workflows.

Graphviz's ``dot`` (Debian's ``graphviz`` package; scripts/setup installs it) lays them out when it
is on the PATH: it places edge labels so they do not overlap. Without it (or when it fails) a small
layered layout (longest path from the roots, back edges ignored for layering) draws them; every
label is XML-escaped either way.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from convengine.catalog import chains as chain_vocab
from convengine.catalog import workflows as wf_vocab
from convengine.chains.model import chain_of, config_of
from convengine.config.flows import workflow_catalog_of
from convengine.config.snapshot import ConfigSnapshot
from convengine.engine.runtime import TurnGraph

NODE_H = 28
LAYER_GAP = 70
NODE_GAP = 24
CHAR_W = 7.2
PAD = 20
DOT_TIMEOUT_S = 10
FONT = "Liberation Sans, Arial, Helvetica, sans-serif"


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    label: str = ""
    dashed: bool = False


def layers(nodes: Sequence[str], edges: Sequence[Edge]) -> dict[str, int]:
    """Each node's layer: the longest path to it from a root, on the graph without its back edges."""
    out: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        if e.source != e.target:
            out[e.source].append(e.target)
    forward = _forward_edges(nodes, out)
    layer = dict.fromkeys(nodes, 0)
    for node in _topological(nodes, forward):
        for target in forward[node]:
            layer[target] = max(layer[target], layer[node] + 1)
    return layer


def _forward_edges(nodes: Sequence[str], out: dict[str, list[str]]) -> dict[str, list[str]]:
    forward: dict[str, list[str]] = defaultdict(list)
    state: dict[str, int] = {}
    for root in nodes:
        if root in state:
            continue
        stack = [(root, iter(out[root]))]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) != 1:  # not a back edge
                forward[node].append(child)
                if child not in state:
                    state[child] = 1
                    stack.append((child, iter(out[child])))
    return forward


def _topological(nodes: Sequence[str], forward: dict[str, list[str]]) -> list[str]:
    incoming = dict.fromkeys(nodes, 0)
    for targets in forward.values():
        for t in targets:
            incoming[t] += 1
    ready = [n for n in nodes if incoming[n] == 0]
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for t in forward[node]:
            incoming[t] -= 1
            if incoming[t] == 0:
                ready.append(t)
    return order


def render_svg(nodes: Sequence[str], edges: Sequence[Edge], *, title: str, highlight: Iterable[str] = ()) -> str:
    """The graph as an SVG document (top to bottom), laid out by Graphviz's ``dot`` when it is
    installed, else by :func:`render_layered`; ``highlight`` nodes are drawn emphasised."""
    nodes = list(dict.fromkeys([*nodes, *(e.source for e in edges), *(e.target for e in edges)]))
    drawn = render_dot(nodes, edges, title=title, highlight=highlight)
    return drawn if drawn is not None else render_layered(nodes, edges, title=title, highlight=highlight)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def dot_source(nodes: Sequence[str], edges: Sequence[Edge], *, title: str, highlight: Iterable[str] = ()) -> str:
    """The graph in Graphviz's DOT language: nodes by number, every name a quoted label."""
    ids = {name: f"n{i}" for i, name in enumerate(nodes)}
    marked = set(highlight)
    lines = [f"digraph {_quoted(title)} {{", "  rankdir=TB; nodesep=0.35; ranksep=0.45;",
             f"  graph [fontname={_quoted(FONT)}]; edge [fontname={_quoted(FONT)}, fontsize=10, color=\"#667788\", fontcolor=\"#445566\"];",
             f"  node [shape=box, style=\"rounded,filled\", fillcolor=\"#eef3ff\", color=\"#4a5a8a\", fontname={_quoted(FONT)}, fontsize=12];"]
    for name in nodes:
        fill = ', fillcolor="#ffe9a8"' if name in marked else ""
        lines.append(f"  {ids[name]} [label={_quoted(name)}, id={_quoted('node_' + ids[name])}{fill}];")
    for e in edges:
        attrs = [f"label={_quoted(e.label)}"] if e.label else []
        if e.dashed:
            attrs.append("style=dashed")
        lines.append(f"  {ids[e.source]} -> {ids[e.target]} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines)


def render_dot(nodes: Sequence[str], edges: Sequence[Edge], *, title: str, highlight: Iterable[str] = ()) -> str | None:
    """The SVG ``dot`` draws, or None when ``dot`` is not installed or failed (the caller falls back)."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    source = dot_source(nodes, edges, title=title, highlight=highlight)
    try:
        done = subprocess.run([dot, "-Tsvg"], input=source.encode(), capture_output=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    svg = done.stdout.decode("utf-8", "replace")
    start = svg.find("<svg")
    if done.returncode != 0 or start < 0:
        return None
    names = {f"node_n{i}": escape(name, _QUOTES) for i, name in enumerate(nodes)}
    svg = _NODE_GROUP.sub(lambda m: f'{m.group(0)} data-node="{names.get(m.group(1), "")}"', svg[start:])
    label = escape(title, _QUOTES)
    return svg.replace("<svg ", f'<svg class="graph" data-layout="dot" role="img" aria-label="{label}" ', 1)


_NODE_GROUP = re.compile(r'<g id="(node_n\d+)" class="node"')


def render_layered(nodes: Sequence[str], edges: Sequence[Edge], *, title: str, highlight: Iterable[str] = ()) -> str:
    """The graph drawn by the built-in layered layout (the fallback when ``dot`` is missing)."""
    layer = layers(nodes, edges)
    rows: dict[int, list[str]] = defaultdict(list)
    for n in nodes:
        rows[layer[n]].append(n)
    width = {n: max(60.0, len(n) * CHAR_W + 20) for n in nodes}
    row_w = {r: sum(width[n] for n in ns) + NODE_GAP * (len(ns) - 1) for r, ns in rows.items()}
    total_w = max(row_w.values(), default=100) + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}
    for r, ns in rows.items():
        x = (total_w - row_w[r]) / 2
        for n in ns:
            pos[n] = (x + width[n] / 2, PAD + r * LAYER_GAP + NODE_H / 2)
            x += width[n] + NODE_GAP
    total_h = PAD * 2 + (max(rows, default=0) + 1) * LAYER_GAP
    marked = set(highlight)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{total_w:.0f}" height="{total_h:.0f}" '
             f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" role="img" aria-label="{escape(title, _QUOTES)}">'),
             ('<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#667"/></marker></defs>'),
             f"<title>{escape(title)}</title>"]
    parts += [_edge(e, pos, layer) for e in edges]
    parts += [_node(n, pos[n], width[n], n in marked) for n in nodes]
    parts.append("</svg>")
    return "".join(parts)


_QUOTES = {'"': "&quot;"}


def _edge(e: Edge, pos: dict[str, tuple[float, float]], layer: dict[str, int]) -> str:
    (x1, y1), (x2, y2) = pos[e.source], pos[e.target]
    dash = ' stroke-dasharray="5 4"' if e.dashed else ""
    if e.source == e.target:
        d = f"M {x1 + 20:.1f} {y1 - NODE_H / 2:.1f} c 30 -30 50 10 {10:.1f} {NODE_H / 2 + 4:.1f}"
    elif layer[e.target] == layer[e.source] + 1:
        d = f"M {x1:.1f} {y1 + NODE_H / 2:.1f} L {x2:.1f} {y2 - NODE_H / 2:.1f}"
    elif layer[e.target] > layer[e.source]:  # skips layers: curve to the side, clear of the nodes between
        bend = 50 + 15 * (layer[e.target] - layer[e.source])
        d = (f"M {x1 + 10:.1f} {y1 + NODE_H / 2:.1f} C {x1 + bend:.1f} {y1 + bend:.1f} "
             f"{x2 + bend:.1f} {y2 - bend:.1f} {x2 + 10:.1f} {y2 - NODE_H / 2:.1f}")
        x1, x2 = x1 + bend * 0.75, x2 + bend * 0.75  # the label sits on the curve
    else:  # a back edge or one within a layer: curve around
        bend = 60 + 10 * abs(layer[e.source] - layer[e.target])
        d = (f"M {x1 + 10:.1f} {y1 - NODE_H / 2:.1f} C {x1 + bend:.1f} {y1 - bend:.1f} "
             f"{x2 + bend:.1f} {y2 + bend:.1f} {x2 + 10:.1f} {y2 + NODE_H / 2:.1f}")
    label = ""
    if e.label:
        label = (f'<text class="edge-label" x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2:.1f}" font-size="10" '
                 f'fill="#556">{escape(e.label)}</text>')
    return f'<path d="{d}" fill="none" stroke="#667"{dash} marker-end="url(#arrow)"/>{label}'


def _node(name: str, at: tuple[float, float], width: float, marked: bool) -> str:
    x, y = at
    fill = "#ffe9a8" if marked else "#eef3ff"
    return (f'<g class="node" data-node="{escape(name, _QUOTES)}"><rect x="{x - width / 2:.1f}" y="{y - NODE_H / 2:.1f}" '
            f'width="{width:.1f}" height="{NODE_H}" rx="6" fill="{fill}" stroke="#4a5a8a"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="12" text-anchor="middle" '
            f'font-family="monospace">{escape(name)}</text></g>')


def state_graph_svg(snapshot: ConfigSnapshot) -> str:
    """The states and their transitions: ce_state_graph rows (solid) and SET_STATE rules (dashed)."""
    edges = [Edge(r.from_state, r.to_state, "" if r.intent_code == "ANY" else r.intent_code)
             for r in snapshot.state_graph if r.enabled]
    for rule in snapshot.rules:
        if getattr(rule, "action", None) == "SET_STATE" and getattr(rule, "enabled", True) and rule.action_value:
            edges.append(Edge(rule.state_code or "ANY", str(rule.action_value).strip(), f"rule {rule.rule_id}", True))
    states = [s for s in snapshot.known_states if s not in ("ANY", "UNKNOWN")] or ["UNKNOWN"]
    return render_svg(states, edges, title="state graph")


def turn_graph_svg(graph: TurnGraph, highlight: Iterable[str] = ()) -> str:
    """The compiled turn graph (LangGraph's nodes and edges; conditional edges dashed)."""
    drawable = graph.get_graph()
    edges = [Edge(e.source, e.target, "", bool(e.conditional)) for e in drawable.edges]
    return render_svg(list(drawable.nodes), edges, title="turn graph", highlight=highlight)


def flow_graph_svg(snapshot: ConfigSnapshot, flow_code: str) -> str:
    """One conversation flow: its nodes (``node_id: node_type``) and edges labelled by outcome."""
    nodes = {n.node_id: f"{n.node_id}: {n.node_type}" for n in snapshot.flow_nodes
             if n.flow_code == flow_code and n.enabled}
    if not nodes:
        raise KeyError(f"no flow {flow_code!r}; flows: {', '.join(sorted({n.flow_code for n in snapshot.flow_nodes}))}")
    edges = [Edge(nodes[e.from_node], nodes[e.to_node], e.outcome or "") for e in snapshot.flow_edges
             if e.flow_code == flow_code and e.enabled and e.from_node in nodes and e.to_node in nodes]
    return render_svg(list(nodes.values()), edges, title=f"flow {flow_code}")
    

def workflow_graph_svg(snapshot: ConfigSnapshot) -> str:
    """Every workflow: its nodes (``WORKFLOW/node: type``) and edges labelled with their outcome or
    ``condition.expr``; a sub-workflow node's hand-over to the called workflow's entry is dashed."""
    catalog = workflow_catalog_of(snapshot)

    def name(code: str, node_id: str) -> str:
        return f"{code}/{node_id}: {catalog.flows[code].nodes[node_id].node_type}"

    nodes: list[str] = []
    edges: list[Edge] = []
    for code, workflow in sorted(catalog.flows.items()):
        nodes += [name(code, n) for n in workflow.nodes]
        for out in workflow.edges.values():
            edges += [Edge(name(code, e.from_node), name(code, e.to_node), e.outcome or e.condition or "")
                      for e in out if e.to_node in workflow.nodes and e.from_node in workflow.nodes]
        for node in workflow.nodes.values():
            called = catalog.get(str((node.config or {}).get("workflow"))) if node.node_type == wf_vocab.WORKFLOW else None
            if called is not None and called.entry in called.nodes:
                edges.append(Edge(name(code, node.node_id), name(called.code, str(called.entry)), "sub-workflow", True))
    return render_svg(nodes or ["no workflows"], edges, title="workflows")


def chain_graph_svg(snapshot: ConfigSnapshot, chain_code: str) -> str:
    """One chain: its steps (``step: type``) in order, each to its ``next`` (or the following step), a
    ``decide`` step's branches labelled with their condition and its ``otherwise``."""
    chain = chain_of(snapshot, chain_code)
    name = {s.step_id: f"{s.step_id}: {s.step_type}" for s in chain.steps}
    name[chain_vocab.END] = "end"
    edges: list[Edge] = []
    for step in chain.steps:
        config = config_of(step)
        if step.step_type == chain_vocab.DECIDE:
            for branch in config.get("branches") or []:
                edges.append(Edge(name[step.step_id], name.get(str(branch.get("goto")), "end"), str(branch.get("when"))))
            edges.append(Edge(name[step.step_id], name.get(str(config.get("otherwise") or chain.following(step.step_id)),
                                                            "end"), "otherwise", True))
        else:
            edges.append(Edge(name[step.step_id], name.get(chain.next_of(step), "end")))
    return render_svg(list(name.values()), edges, title=f"chain {chain.code}")
