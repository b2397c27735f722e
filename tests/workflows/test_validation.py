"""Publish validation of workflows: each refusal names the workflow, the node (or edge) and the rule."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader.build import SnapshotInput, build_snapshot
from convengine.engine import Engine
from tests.workflows.packs import chain, edge, node, support_pack, workflow, workflows_pack

REFUSED = ["script", "datastore", "set", "human", "parallel", "wait"]


def refusals(nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
             workflows: list[dict[str, Any]] | None = None, **settings: Any) -> list[str]:
    data = workflows_pack(workflows or [workflow("W")], nodes, edges)
    data["settings"].setdefault("flows", {}).update(settings)
    with pytest.raises(ConfigValidationError) as caught:
        build_snapshot(SnapshotInput({k: v for k, v in data.items() if k != "settings"},
                                     settings_overrides=data["settings"]))
    return [str(v) for v in caught.value.violations]


def test_the_example_workflows_are_valid() -> None:
    data = support_pack()
    snapshot = build_snapshot(SnapshotInput({k: v for k, v in data.items() if k != "settings"},
                                            settings_overrides=data["settings"]))
    assert {f.flow_code: f.kind for f in snapshot.flows} == {"SUPPORT": "workflow", "ORDER": "workflow"}


@pytest.mark.parametrize("node_type", REFUSED)
def test_node_types_the_runtime_does_not_run_are_refused(node_type: str) -> None:
    found = refusals([node("W", "in", "trigger"), node("W", "odd", node_type, variable="x", code="1"),
                      node("W", "end", "end")], chain("W", "in", "odd", "end"))
    assert found == [(f"ce_flow_node[#2 (row 2, no flow_node_id)].node_type: workflow W node odd: node type {node_type!r} is not "
                     "run by the workflow runtime (refused: datastore, human, parallel, script, set, wait) "
                     "(rule: unsupported-node-type)")]


def test_an_entry_that_reaches_no_agent_knowledge_or_end_is_refused() -> None:
    found = refusals([node("W", "in", "trigger"), node("W", "route", "router"),
                      node("W", "look", "tool", tool="orders.status"), node("W", "other", "trigger"),
                      node("W", "end", "end")],
                     [edge("W", "in", "route"), edge("W", "route", "look"), edge("W", "other", "end")],
                     [workflow("W", entry_node="in")])
    assert [v for v in found if "reaches" in v] == [
        ("ce_flow_node[#1 (row 1, no flow_node_id)].node_id: workflow W node in: no agent, knowledge or end node is reachable "
        "from this entry (rule: reaches-agent-knowledge-or-end)")]


@pytest.mark.parametrize(("nodes", "edges", "workflows", "expected"), [
    ([node("W", "a", "router"), node("W", "end", "end")], [edge("W", "a", "end")], None,
     ("ce_flow[W].entry_node: workflow W: needs one entry: a single trigger or root_agent node, or entry_node "
     "naming where a conversation starts (found 0) (rule: entry)")),
    ([node("W", "a", "trigger"), node("W", "b", "trigger"), node("W", "end", "end")],
     [edge("W", "a", "end"), edge("W", "b", "end")], None, "(found 2) (rule: entry)"),
    ([node("W", "in", "trigger"), node("W", "end", "end")], [edge("W", "in", "gone")], None,
     "workflow W edge in->gone: points at node 'gone', which does not exist (rule: edge-target)"),
    ([node("W", "in", "trigger"), node("W", "end", "end")], [edge("W", "in", "end", condition="text ==")], None,
     "workflow W edge in->end: condition.expr 'text ==' is not valid"),
    ([node("W", "in", "trigger"), node("W", "end", "end")], [edge("W", "in", "end", outcome="not_found")], None,
     "workflow W edge in->end: a trigger node has no outcome 'not_found' (rule: edge-outcome)"),
    ([node("W", "in", "trigger"), node("W", "t", "tool"), node("W", "end", "end")], chain("W", "in", "t", "end"),
     None, "workflow W node t: a tool node needs tool (rule: node-config)"),
    ([node("W", "in", "trigger"), node("W", "sub", "workflow", workflow="NOPE"), node("W", "end", "end")],
     chain("W", "in", "sub", "end"), None,
     "workflow W node sub: sub-workflow 'NOPE' is not an enabled ce_flow row of kind workflow (rule: sub-workflow)"),
    ([node("W", "in", "trigger"), node("W", "sub", "workflow", workflow="W"), node("W", "end", "end")],
     chain("W", "in", "sub", "end"), None,
     "workflow W node sub: sub-workflow 'W' closes a call cycle (W -> W) (rule: sub-workflow)"),
    ([node("W", "in", "trigger"), node("W", "ag", "agent", instructions="x", max_steps=99), node("W", "end", "end")],
     chain("W", "in", "ag", "end"), None, "workflow W node ag: max_steps must be a whole number from 1 to 32"),
    ([node("W", "in", "trigger"), node("W", "x", "message", text="hi"), node("W", "end", "end")],
     chain("W", "in", "x", "end"), None, "workflow W node x: unknown node type 'message'"),
], ids=["no-entry", "two-entries", "edge-target", "expression", "outcome", "config", "missing-sub", "call-cycle",
        "agent-options", "unknown-type"])
def test_structural_refusals(nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
                             workflows: list[dict[str, Any]] | None, expected: str) -> None:
    found = refusals(nodes, edges, workflows)
    assert any(expected in v for v in found), found


def test_the_root_workflow_setting_must_name_a_workflow() -> None:
    found = refusals([node("W", "in", "trigger"), node("W", "end", "end")], [edge("W", "in", "end")],
                     **{"root-workflow": "GONE"})
    assert found == [("settings[flows.root-workflow]: root workflow 'GONE' is not an enabled ce_flow row of kind "
                     "workflow (rule: entry)")]


def test_a_subflow_may_not_name_a_workflow_and_kinds_are_checked() -> None:
    flows = [workflow("W"), {"flow_code": "F"}, {"flow_code": "K", "kind": "graph"}]
    found = refusals([node("W", "in", "trigger"), node("W", "end", "end"), node("F", "start", "start"),
                      node("F", "call", "subflow", flow="W"), node("F", "end", "end")],
                     [edge("W", "in", "end"), *chain("F", "start", "call", "end")], flows)
    assert any("flow F node call: subflow 'W' does not exist (no enabled ce_flow row of kind flow: it is a workflow)"
               in v for v in found), found
    assert any("flow K: kind must be one of flow, workflow (got 'graph')" in v for v in found), found


async def test_every_refusal_is_named_when_a_pack_is_imported(db_url: str) -> None:
    """On the database: an import of a pack breaking every rule at once is refused whole, each refusal named."""
    nodes = [node("W", "in", "trigger"), *(node("W", t, t, variable="x", code="1") for t in REFUSED),
             node("W", "look", "tool", tool="orders.status"),
             node("V", "in", "trigger"), node("V", "end", "end")]
    edges = [edge("W", "in", "look"), *(edge("W", "in", t) for t in REFUSED), edge("V", "in", "end")]
    data = workflows_pack([workflow("W"), workflow("V")], nodes, edges)
    with pytest.raises(ConfigValidationError) as caught:
        await Engine.aopen(db_url, pack=data)
    reasons = [v.reason for v in caught.value.violations]
    for node_type in REFUSED:
        assert any(r.startswith(f"workflow W node {node_type}: node type {node_type!r}")
                   and r.endswith("(rule: unsupported-node-type)") for r in reasons), reasons
    assert "workflow W node in: no agent, knowledge or end node is reachable from this entry " \
           "(rule: reaches-agent-knowledge-or-end)" in reasons
    assert len(reasons) == len(REFUSED) + 1
