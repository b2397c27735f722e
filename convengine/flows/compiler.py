"""Each flow compiles (once per configuration version) into a LangGraph graph with one node per
flow node. Running it from a node walks edges until a node waits, the flow ends, calls a subflow
or hands off; calls, returns and digressions between flows are :mod:`convengine.flows.call_stack`'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Checkpointer, Command
from typing_extensions import TypedDict

from convengine.catalog import flows as vocab
from convengine.config.flows import Flow
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord
from convengine.flows.nodes import HANDLERS
from convengine.flows.walk_state import FlowError, Walk

FAILURE_OUTCOMES = frozenset({vocab.ESCALATE, vocab.NOT_FOUND, vocab.ERROR})


class FlowRun(TypedDict, total=False):
    node: str
    mode: str
    result: dict[str, Any]


def select_edge(walk: Walk, flow: Flow, node_id: str, outcome: str | None) -> FlowEdgeRecord | None:
    """The first edge (by priority, the default last) for ``outcome`` whose condition holds."""
    for edge in flow.out(node_id):
        if edge.outcome is not None and edge.outcome != outcome:
            continue
        if edge.outcome is None and outcome in FAILURE_OUTCOMES:
            continue
        if edge.condition and not walk.evaluate(edge.condition, f"ce_flow_edge[{flow.code}/{edge.flow_edge_id}]"):
            continue
        return edge
    return None


def _make_node(flow: Flow, node: FlowNodeRecord) -> Any:
    async def run(state: FlowRun, runtime: Runtime[Walk]) -> Command[Any]:
        walk = runtime.context
        walk.tick(flow, node.node_id)
        mode = state.get("mode") or vocab.MODE_ENTER
        walk.turn.audit(walk.names.node, {walk.names.key: flow.code, "node": node.node_id, "type": node.node_type,
                                          "mode": mode})
        handler = (walk.handlers or HANDLERS)[node.node_type]
        result = await handler(walk, flow, node, mode)
        if result.kind != "next":
            return Command(goto=END, update={"result": {"kind": result.kind, "node": node.node_id,
                                                        "flow": result.flow}})
        edge = select_edge(walk, flow, node.node_id, result.outcome)
        if edge is None:
            if result.outcome in FAILURE_OUTCOMES or flow.out(node.node_id):
                raise FlowError(f"{walk.names.key} {flow.code} node {node.node_id}: no edge for outcome "
                                f"{result.outcome or 'default'} whose condition holds")
            return Command(goto=END, update={"result": {"kind": "end", "node": node.node_id}})
        if walk.names.routed:
            walk.turn.audit(walk.names.routed, {walk.names.key: flow.code, "from": node.node_id, "to": edge.to_node,
                                                "condition": edge.condition, "outcome": edge.outcome})
        return Command(goto=edge.to_node, update={"node": edge.to_node, "mode": vocab.MODE_ENTER})

    run.__name__ = node.node_id
    return run


FlowGraph = CompiledStateGraph[FlowRun, Walk, FlowRun, FlowRun]
"""A flow compiled: its nodes over a :class:`FlowRun`, run with the turn's :class:`Walk` as context."""


def compile_flow(flow: Flow, *, checkpointer: Checkpointer = None) -> FlowGraph:
    """The flow as a LangGraph graph of :func:`node_functions` (what Studio and ``get_graph(xray=True)``
    draw as the ``flow`` step's subgraphs; :mod:`convengine.flows.display`)."""
    graph: StateGraph[FlowRun, Walk, FlowRun, FlowRun] = StateGraph(FlowRun, context_schema=Walk)
    for node_id, run in node_functions(flow).items():
        targets = tuple(dict.fromkeys(e.to_node for e in flow.out(node_id))) + (END,)
        graph.add_node(node_id, cast(Any, run), destinations=targets)
    graph.add_conditional_edges(START, lambda s: s["node"], {n: n for n in flow.nodes})
    return graph.compile(checkpointer=checkpointer, name=f"flow:{flow.code}")


NodeFunction = Callable[[FlowRun, Runtime[Walk]], Awaitable[Command[Any]]]


def node_functions(flow: Flow) -> dict[str, NodeFunction]:
    """One function per flow node: run the node's handler, then choose the edge to follow."""
    return {node_id: _make_node(flow, node) for node_id, node in flow.nodes.items()}


_PROGRAMS: dict[tuple[str, str], dict[str, NodeFunction]] = {}


def program(version: str, flow: Flow) -> dict[str, NodeFunction]:
    """The flow's node functions for a configuration version (built on first use)."""
    key = (version, flow.code)
    found = _PROGRAMS.get(key)
    if found is None:
        if len(_PROGRAMS) > 256:
            _PROGRAMS.clear()
        found = _PROGRAMS[key] = node_functions(flow)
    return found


@dataclass(frozen=True)
class _WalkRuntime:
    """What a node function reads of LangGraph's ``Runtime``: the walk as context."""

    context: Walk


async def run_flow(walk: Walk, flow: Flow, node_id: str, mode: str) -> dict[str, Any]:
    """Walk ``flow`` from ``node_id`` entered in ``mode``; returns the stop: kind, node, flow.

    The node functions are the compiled graph's, followed edge by edge here rather than through a
    nested LangGraph run (which cost more than the rest of the step); ``walk.tick`` bounds the steps.
    """
    functions = program(walk.turn.snapshot.version, flow)
    if node_id not in functions:
        raise FlowError(f"{walk.names.key} {flow.code} has no node {node_id!r}")
    state: FlowRun = {"node": node_id, "mode": mode}
    runtime = cast("Runtime[Walk]", _WalkRuntime(walk))
    target: Any = node_id
    while target != END:
        command = await functions[target](state, runtime)
        state.update(cast(FlowRun, command.update or {}))
        target = command.goto
    return dict(state.get("result") or {"kind": "end", "node": node_id})
