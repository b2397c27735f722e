"""The flows of a configuration, indexed for the walker: which flow an intent enters and where, a
flow's entry node, and its edges in the order the walker tries them."""

from __future__ import annotations

from typing import Any

from convengine.config.flows import FlowCatalog, intent_of
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord, FlowRecord

_ids = iter(range(1, 10_000))


def node(flow: str, node_id: str, kind: str, enabled: bool = True, **config: Any) -> FlowNodeRecord:
    return FlowNodeRecord(flow_node_id=next(_ids), flow_code=flow, node_id=node_id, node_type=kind,
                          config=config or None, enabled=enabled)


def edge(flow: str, src: str, dst: str, **fields: Any) -> FlowEdgeRecord:
    return FlowEdgeRecord(flow_edge_id=next(_ids), flow_code=flow, from_node=src, to_node=dst, **fields)


def test_an_intent_enters_the_flow_of_lowest_priority_at_its_entry() -> None:
    catalog = FlowCatalog.build(
        [FlowRecord(flow_code="late", intent_code="ORDER", priority=50),
         FlowRecord(flow_code="early", intent_code="ORDER", priority=10),
         FlowRecord(flow_code="off", intent_code="REFUND", priority=1, enabled=False)],
        [node("early", "s", "start"), node("late", "s", "start"), node("off", "s", "start")], [])
    found = catalog.for_intent("ORDER")
    assert found is not None and found[0].code == "early" and found[1] is None
    assert catalog.for_intent("REFUND") is None  # a disabled flow is not in the index
    assert catalog.for_intent(None) is None and catalog.get("off") is None


def test_an_intent_node_is_an_entry_of_its_own_intent() -> None:
    catalog = FlowCatalog.build(
        [FlowRecord(flow_code="support", intent_code="HELP")],
        [node("support", "start", "start"), node("support", "billing", "intent", intent=" billing "),
         node("support", "gone", "intent", enabled=False, intent="returns")], [])
    found = catalog.for_intent("BILLING")
    assert found is not None and (found[0].code, found[1]) == ("support", "billing")
    assert catalog.for_intent("RETURNS") is None  # the node is disabled


def test_intent_of_reads_only_intent_nodes() -> None:
    assert intent_of(node("f", "a", "intent", intent="pay")) == "PAY"
    assert intent_of(node("f", "b", "message", intent="pay")) is None
    assert intent_of(node("f", "c", "intent", intent="  ")) is None
    assert intent_of(node("f", "d", "intent")) is None


def test_the_entry_is_the_configured_node_else_the_only_start() -> None:
    catalog = FlowCatalog.build(
        [FlowRecord(flow_code="configured", entry_node="b"), FlowRecord(flow_code="single"),
         FlowRecord(flow_code="ambiguous"), FlowRecord(flow_code="by_intent")],
        [node("configured", "a", "start"), node("configured", "b", "message"),
         node("single", "go", "start"), node("single", "m", "message"),
         node("ambiguous", "s1", "start"), node("ambiguous", "s2", "start"),
         node("by_intent", "i", "intent")], [])
    entries = {code: flow.entry for code, flow in catalog.flows.items()}
    assert entries == {"configured": "b", "single": "go", "ambiguous": None, "by_intent": "i"}


def test_edges_are_tried_conditional_first_by_priority_and_the_default_last() -> None:
    flow = "f"
    edges = [edge(flow, "d", "fallback"),
             edge(flow, "d", "second", condition="x > 1", priority=20),
             edge(flow, "d", "first", outcome="yes", priority=10),
             edge(flow, "d", "never", condition="x", priority=1, enabled=False),
             edge(flow, "other", "x")]
    catalog = FlowCatalog.build([FlowRecord(flow_code=flow)], [node(flow, "d", "decision")], edges)
    walked = catalog.flows[flow]
    assert [e.to_node for e in walked.out("d")] == ["first", "second", "fallback"]
    assert walked.out("missing") == () and walked.node("d").node_type == "decision"
