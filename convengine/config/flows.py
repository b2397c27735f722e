"""The flows of a configuration, indexed: nodes by id, outgoing edges by priority, flows by intent."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from convengine.catalog import flows as vocab
from convengine.catalog import workflows as wf_vocab
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord, FlowRecord
from convengine.config.snapshot import ConfigSnapshot


@dataclass(frozen=True, slots=True)
class Flow:
    """One enabled flow: its row, its enabled nodes and its enabled edges (by source, best first)."""

    record: FlowRecord
    nodes: dict[str, FlowNodeRecord]
    edges: dict[str, tuple[FlowEdgeRecord, ...]]

    @property
    def code(self) -> str:
        return self.record.flow_code

    @property
    def is_workflow(self) -> bool:
        return self.record.kind == wf_vocab.KIND_WORKFLOW

    @property
    def entry(self) -> str | None:
        """The entry node: the configured one, else the only ``start`` (or ``intent``) node; a
        workflow's only trigger or root agent."""
        if self.record.entry_node:
            return self.record.entry_node
        if self.is_workflow:
            entries = [n.node_id for n in self.nodes.values() if n.node_type in wf_vocab.ENTRY_TYPES]
            return entries[0] if len(entries) == 1 else None
        starts = [n.node_id for n in self.nodes.values() if n.node_type == vocab.START]
        if not starts:
            starts = [n.node_id for n in self.nodes.values() if n.node_type == vocab.INTENT]
        return starts[0] if len(starts) == 1 else None

    def node(self, node_id: str) -> FlowNodeRecord:
        return self.nodes[node_id]

    def out(self, node_id: str) -> tuple[FlowEdgeRecord, ...]:
        return self.edges.get(node_id, ())


@dataclass(frozen=True, slots=True)
class FlowCatalog:
    """Every enabled flow of a snapshot."""

    flows: dict[str, Flow] = field(default_factory=dict)
    by_intent: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Intent -> (flow, entry node): a flow's ``intent_code`` enters at its entry (``None``), an
    ``intent`` node with ``config.intent`` enters at that node; the flow with the lowest priority wins."""

    @classmethod
    def build(cls, flows: Iterable[FlowRecord], nodes: Iterable[FlowNodeRecord],
              edges: Iterable[FlowEdgeRecord], *, kind: str = wf_vocab.KIND_FLOW) -> FlowCatalog:
        """The enabled flows of one ``kind``: conversation flows, or workflow graphs."""
        enabled = {f.flow_code: f for f in flows if f.enabled and f.kind == kind}
        node_map: dict[str, dict[str, FlowNodeRecord]] = {code: {} for code in enabled}
        for node in nodes:
            if node.enabled and node.flow_code in node_map:
                node_map[node.flow_code][node.node_id] = node
        edge_map: dict[str, dict[str, list[FlowEdgeRecord]]] = {code: {} for code in enabled}
        for edge in edges:
            if edge.enabled and edge.flow_code in edge_map:
                edge_map[edge.flow_code].setdefault(edge.from_node, []).append(edge)
        built = {code: Flow(rec, node_map[code], {k: tuple(sorted(v, key=_edge_order))
                                                  for k, v in edge_map[code].items()})
                 for code, rec in enabled.items()}
        by_intent: dict[str, tuple[str, str | None]] = {}
        for rec in sorted(enabled.values(), key=lambda f: (f.priority, f.flow_code)):
            if rec.intent_code:
                by_intent.setdefault(rec.intent_code, (rec.flow_code, None))
            for node_id, intent in intent_entries(built[rec.flow_code]):
                by_intent.setdefault(intent, (rec.flow_code, node_id))
        return cls(built, by_intent)

    def get(self, code: str) -> Flow | None:
        return self.flows.get(code)

    def for_intent(self, intent: str | None) -> tuple[Flow, str | None] | None:
        """The flow ``intent`` enters and the node it enters at (``None``: the flow's entry)."""
        found = self.by_intent.get(intent or "")
        flow = self.flows.get(found[0]) if found else None
        return (flow, found[1]) if flow is not None and found is not None else None


def intent_of(node: FlowNodeRecord) -> str | None:
    """The intent an ``intent`` node is the entry of (``config.intent``, upper-cased), if any."""
    config = node.config if isinstance(node.config, dict) else {}
    value = config.get("intent") if node.node_type == vocab.INTENT else None
    return (str(value).strip().upper() or None) if value else None


def intent_entries(flow: Flow) -> list[tuple[str, str]]:
    """(node id, intent) of the flow's ``intent`` nodes that name an intent, by node id."""
    return sorted((n.node_id, i) for n in flow.nodes.values() if (i := intent_of(n)))


def _edge_order(edge: FlowEdgeRecord) -> tuple[Any, ...]:
    """Conditional edges by priority first, the unconditional (default) edge last."""
    return (edge.condition is None and edge.outcome is None, edge.priority, edge.flow_edge_id)


_CACHE: dict[tuple[str, str], FlowCatalog] = {}


def catalog_of(snapshot: ConfigSnapshot, kind: str = wf_vocab.KIND_FLOW) -> FlowCatalog:
    """The conversation flows (or, with ``kind="workflow"``, the workflow graphs) of a snapshot, built
    once per configuration version."""
    key = (snapshot.version, kind)
    found = _CACHE.get(key)
    if found is None:
        found = FlowCatalog.build(snapshot.flows, snapshot.flow_nodes, snapshot.flow_edges, kind=kind)
        if len(_CACHE) > 32:
            _CACHE.clear()
        _CACHE[key] = found
    return found


def workflow_catalog_of(snapshot: ConfigSnapshot) -> FlowCatalog:
    """The workflow graphs of a snapshot (``ce_flow`` rows of kind ``workflow``)."""
    return catalog_of(snapshot, wf_vocab.KIND_WORKFLOW)
