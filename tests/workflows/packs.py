"""Workflow packs shared by the workflow tests: ``ce_flow`` rows of kind ``workflow``."""

from __future__ import annotations

from typing import Any

from tests.flows.packs import chain, edge, node
from tests.helpers import pack

__all__ = ["chain", "edge", "node", "plan", "workflow", "workflows_pack"]


def workflow(code: str, **columns: Any) -> dict[str, Any]:
    return {"flow_code": code, "kind": "workflow", **columns}


def plan(**step: Any) -> dict[str, Any]:
    """A planner reply (the agent nodes' plan format)."""
    return {"action": "ANSWER", "tool_code": None, "args": None, "answer": None, "operation_tag": None, **step}


def workflows_pack(workflows: list[dict[str, Any]], nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
                   *, root: str | None = None, **tables: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}}
    if root:
        settings["flows"] = {"root-workflow": root}
    return pack(settings=settings, ce_flow=workflows, ce_flow_node=nodes, ce_flow_edge=edges, **tables)


# SUPPORT: trigger -> router; text about an order -> ORDER (sub-workflow: tool, decision, ends);
# session.vip (set by the tool of a previous order lookup) -> vip end; user.tier == 'gold' -> gold end;
# else the helper agent.
SUPPORT_NODES = [
    node("SUPPORT", "in", "trigger"),
    node("SUPPORT", "route", "router"),
    node("SUPPORT", "order", "workflow", workflow="ORDER"),
    node("SUPPORT", "vip", "end", text="Hello again, valued customer {{ session.order.customer }}."),
    node("SUPPORT", "gold", "end", text="Gold desk: how can we help?"),
    node("SUPPORT", "helper", "agent", instructions="Help with orders."),
    node("SUPPORT", "after", "end", text="Anything else?"),
    node("SUPPORT", "done", "end"),
    node("ORDER", "start", "trigger"),
    node("ORDER", "lookup", "tool", tool="orders.status", args={"text": "{{ text }}"}, variable="order"),
    node("ORDER", "check", "decision"),
    node("ORDER", "late", "end", text="Order {{ session.order.id }} is late."),
    node("ORDER", "fine", "end", text="Order {{ session.order.id }} is {{ session.order.status }}."),
    node("ORDER", "failed", "end", text="The order service is down."),
]
SUPPORT_EDGES = [
    edge("SUPPORT", "in", "route"),
    edge("SUPPORT", "route", "order", condition="contains(text, 'order')", priority=1),
    edge("SUPPORT", "route", "vip", condition="session.order.vip == true", priority=2),
    edge("SUPPORT", "route", "gold", condition="user.tier == 'gold'", priority=3),
    edge("SUPPORT", "route", "helper"),
    edge("SUPPORT", "order", "after"),
    edge("SUPPORT", "helper", "done"),
    *chain("ORDER", "start", "lookup", "check"),
    edge("ORDER", "lookup", "failed", outcome="error"),
    edge("ORDER", "check", "late", condition="session.order.status == 'late'", priority=1),
    edge("ORDER", "check", "fine"),
]
SUPPORT_WORKFLOWS = [workflow("SUPPORT"), workflow("ORDER")]
ORDER_TOOL = [{"tool_code": "orders.status", "tool_group": "CALCULATOR_TRANSFORM", "description": "an order"}]


def support_pack(**tables: Any) -> dict[str, Any]:
    return workflows_pack(SUPPORT_WORKFLOWS, SUPPORT_NODES, SUPPORT_EDGES, root="SUPPORT", ce_mcp_tool=ORDER_TOOL,
                          **tables)
