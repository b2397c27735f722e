"""Publish validation: a flow is refused at load, every violation named with flow, node and edge."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader.build import SnapshotInput, build_snapshot
from convengine.engine import Engine
from tests.flows.packs import chain, edge, flows_pack, node


def violations(nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
               flows: list[dict[str, Any]] | None = None) -> list[str]:
    data = flows_pack(nodes=nodes, edges=edges, flows=flows or [{"flow_code": "BAD"}])
    tables = {k: v for k, v in data.items() if k != "settings"}
    with pytest.raises(ConfigValidationError) as caught:
        build_snapshot(SnapshotInput(tables, settings_overrides={"flows": data["settings"]["flows"]}))
    return [str(v) for v in caught.value.violations]


def test_the_example_flows_are_valid() -> None:
    data = flows_pack()
    snapshot = build_snapshot(SnapshotInput({k: v for k, v in data.items() if k != "settings"}))
    assert {f.flow_code for f in snapshot.flows} == {"LOAN", "GREET", "WELCOME"}


def test_unreachable_node() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "end", "end"), node("BAD", "lost", "message", text="x"),
                        node("BAD", "lost_end", "end")],
                       [*chain("BAD", "start", "end"), edge("BAD", "lost", "lost_end")])
    assert any("flow BAD node lost: unreachable from entry start" in v for v in found)
    assert any("flow BAD node lost_end: unreachable" in v for v in found)


def test_path_that_never_ends_nor_waits() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "say", "message", text="x"),
                        node("BAD", "end", "end"), node("BAD", "branch", "decision")],
                       [edge("BAD", "start", "branch"), edge("BAD", "branch", "end", condition="session.a == 1"),
                        edge("BAD", "branch", "say")])
    assert any("flow BAD node say: no path from here reaches an end node or waits for input" in v for v in found)


def test_edge_pointing_nowhere() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "end", "end")],
                       [*chain("BAD", "start", "end"), edge("BAD", "start", "ghost")])
    assert any("ce_flow_edge" in v and "flow BAD edge start->ghost: points at node 'ghost', which does not exist" in v
               for v in found)


def test_missing_subflow() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "call", "subflow", flow="NOPE"),
                        node("BAD", "end", "end")], chain("BAD", "start", "call", "end"))
    assert any("flow BAD node call: subflow 'NOPE' does not exist" in v for v in found)


def test_recursive_subflows_are_refused() -> None:
    found = violations(
        [node("BAD", "start", "start"), node("BAD", "call", "subflow", flow="OTHER"), node("BAD", "end", "end"),
         node("OTHER", "start", "start"), node("OTHER", "ask", "entity", variable="x", prompt="?"),
         node("OTHER", "back", "subflow", flow="BAD"), node("OTHER", "end", "end"),
         node("SELF", "start", "start"), node("SELF", "again", "subflow", flow="SELF"), node("SELF", "end", "end")],
        [*chain("BAD", "start", "call", "end"), *chain("OTHER", "start", "ask", "back", "end"),
         *chain("SELF", "start", "again", "end")],
        flows=[{"flow_code": "BAD"}, {"flow_code": "OTHER"}, {"flow_code": "SELF"}])
    assert any("flow OTHER node back: subflow 'BAD' closes a subflow cycle (BAD -> OTHER -> BAD) entered by edge "
               "ask->back" in v for v in found), found
    assert any("flow SELF node again: subflow 'SELF' closes a subflow cycle (SELF -> SELF)" in v for v in found)
    assert len([v for v in found if "subflow cycle" in v]) == 2


def test_names_langgraph_reserves_are_refused() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "a:b", "message", text="x"), node("BAD", "end", "end")],
                       chain("BAD", "start", "end"), flows=[{"flow_code": "BAD"}, {"flow_code": "A|B"}])
    assert any("flow BAD node a:b: node ids may not start with '__' nor contain '|' or ':'" in v for v in found)
    assert any("flow A|B: flow codes may not start with '__'" in v for v in found)


def test_intent_nodes_name_an_enabled_intent_once_and_are_entries() -> None:
    found = violations([node("BAD", "a", "intent", intent="LOAN"), node("BAD", "b", "intent", intent="NOPE"),
                        node("BAD", "c", "intent", intent="loan"), node("BAD", "end", "end"),
                        node("CALLER", "start", "start"), node("CALLER", "call", "subflow", flow="BAD"),
                        node("CALLER", "end", "end")],
                       [*chain("BAD", "a", "end"), *chain("BAD", "b", "end"), *chain("BAD", "c", "end"),
                        *chain("CALLER", "start", "call", "end")],
                       flows=[{"flow_code": "BAD", "intent_code": "GREETING"}, {"flow_code": "CALLER"}])
    assert any("flow BAD node b: intent 'NOPE' is not an enabled ce_intent" in v for v in found)
    assert any("flow BAD node c: intent 'LOAN' already enters this flow at node a" in v for v in found)
    assert any("flow BAD: intent GREETING enters the flow at its entry, but it has none" in v for v in found)
    assert any("flow CALLER node call: subflow 'BAD' has no single entry" in v for v in found)
    assert not any("unreachable" in v for v in found)  # every intent node is an entry


def test_cycle_without_waiting() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "a", "set", variable="n", value="1"),
                        node("BAD", "b", "decision"), node("BAD", "end", "end")],
                       [*chain("BAD", "start", "a", "b"), edge("BAD", "b", "end", condition="session.n > 3", priority=1),
                        edge("BAD", "b", "a")])
    assert any("flow BAD edge b->a: closes a cycle (a -> b -> a) that can run without waiting for input" in v
               for v in found)


def test_cycle_through_a_waiting_node_is_allowed() -> None:
    data = flows_pack()  # LOAN: ask_amount -> human -> after_human -> ask_amount waits on each lap
    build_snapshot(SnapshotInput({k: v for k, v in data.items() if k != "settings"}))


def test_bad_types_outcomes_and_expressions() -> None:
    found = violations([node("BAD", "start", "start"), node("BAD", "w", "wormhole"),
                        node("BAD", "ask", "entity", variable="x", prompt="?"), node("BAD", "end", "end")],
                       [*chain("BAD", "start", "ask", "end"), edge("BAD", "ask", "end", outcome="found"),
                        edge("BAD", "start", "w", condition="__import__('os')")])
    assert any("flow BAD node w: unknown node type 'wormhole'" in v for v in found)
    assert any("flow BAD edge ask->end: a entity node has no outcome 'found'" in v for v in found)
    assert any("flow BAD edge start->w: expression" in v and "only these functions may be called" in v for v in found)


BAD_FLOWS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]], str]] = {
    "unreachable": ([node("BAD", "start", "start"), node("BAD", "end", "end"), node("BAD", "lost", "end")],
                    chain("BAD", "start", "end"), "flow BAD node lost: unreachable from entry start"),
    "never ends nor waits": ([node("BAD", "start", "start"), node("BAD", "a", "decision"), node("BAD", "b", "decision"),
                              node("BAD", "end", "end")],
                             [*chain("BAD", "start", "a", "b"), edge("BAD", "b", "a", condition="session.x == 1")],
                             "flow BAD node a: no path from here reaches an end node or waits for input"),
    "edge to nowhere": ([node("BAD", "start", "start"), node("BAD", "end", "end")],
                        [edge("BAD", "start", "nowhere"), *chain("BAD", "start", "end")],
                        "flow BAD edge start->nowhere: points at node 'nowhere'"),
    "missing subflow": ([node("BAD", "start", "start"), node("BAD", "call", "subflow", flow="NOPE"),
                         node("BAD", "end", "end")], chain("BAD", "start", "call", "end"),
                        "flow BAD node call: subflow 'NOPE' does not exist"),
    "recursive subflow": ([node("BAD", "start", "start"), node("BAD", "ask", "entity", variable="x", prompt="?"),
                           node("BAD", "call", "subflow", flow="BAD"), node("BAD", "end", "end")],
                          chain("BAD", "start", "ask", "call", "end"),
                          "flow BAD node call: subflow 'BAD' closes a subflow cycle (BAD -> BAD)"),
    "cycle without waiting": ([node("BAD", "start", "start"), node("BAD", "a", "set", variable="n", value="1"),
                               node("BAD", "b", "decision"), node("BAD", "end", "end")],
                              [*chain("BAD", "start", "a", "b"),
                               edge("BAD", "b", "end", condition="session.n > 3", priority=1), edge("BAD", "b", "a")],
                              "flow BAD edge b->a: closes a cycle (a -> b -> a)"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", list(BAD_FLOWS))
async def test_each_publish_error_refuses_the_pack_at_load_on_both_backends(db_url: str, sync_engine: sa.Engine,
                                                                           kind: str) -> None:
    nodes, edges, message = BAD_FLOWS[kind]
    data = flows_pack(nodes=nodes, edges=edges, flows=[{"flow_code": "BAD"}])
    with pytest.raises(ConfigValidationError) as caught:
        await Engine.aopen(db_url, pack=data)
    assert any(message in str(v) for v in caught.value.violations), caught.value.violations
    with sync_engine.connect() as conn:  # nothing of the refused pack was written
        assert conn.execute(sa.text("SELECT count(*) FROM ce_flow")).scalar_one() == 0
