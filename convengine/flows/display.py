"""Flows drawn as subgraphs of the turn graph (LangGraph Studio, ``get_graph(xray=True)``).

The ``flow`` step walks each flow's node functions itself (:func:`convengine.flows.compiler.run_flow`),
so LangGraph cannot see them from the step's code. :func:`attach_flows` tells it: the step's node
gets one subgraph, ``flows``, with one node per flow, each the flow's own graph (one node per flow
node). Drawing with ``xray=True`` then shows ``flow:<FLOW_CODE>:<node_id>`` nodes and their edges.
The workflows (``ce_flow`` rows of kind ``workflow``, which the same step runs) are drawn the same way
(codes are unique across both kinds). Nothing here changes how a turn runs.
"""

from __future__ import annotations

from typing import Any, TypeVar

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

from convengine.catalog import names
from convengine.config.flows import FlowCatalog, catalog_of, workflow_catalog_of
from convengine.config.snapshot import ConfigSnapshot
from convengine.flows.compiler import FlowRun, compile_flow


class _Dispatch(TypedDict, total=False):
    flow: str
    node: str
    mode: str
    result: dict[str, Any]


def flows_graph(catalog: FlowCatalog) -> Any:
    """One graph holding every flow of ``catalog`` as a subgraph (dispatched by ``flow``)."""
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(_Dispatch)
    codes = sorted(catalog.flows)
    for code in codes:
        graph.add_node(code, compile_flow(catalog.flows[code]), input_schema=FlowRun)
        graph.add_edge(code, END)
    graph.add_conditional_edges(START, lambda s: s["flow"], {c: c for c in codes})
    return graph.compile(name="flows")


G = TypeVar("G", bound=CompiledStateGraph[Any, Any, Any, Any])


def attach_flows(compiled: G, snapshot: ConfigSnapshot) -> G:
    """Make the compiled turn graph draw ``snapshot``'s flows and workflows inside its ``flow`` step; returns it."""
    catalog = FlowCatalog({**catalog_of(snapshot).flows, **workflow_catalog_of(snapshot).flows})
    node = compiled.nodes.get(names.FLOW)
    if node is not None:
        node.subgraphs = [flows_graph(catalog)] if catalog.flows else []
    return compiled
