"""Flow packs shared by the flow tests."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from tests.helpers import pack


def node(flow_code: str, node_id: str, node_type: str, /, **config: Any) -> dict[str, Any]:
    return {"flow_code": flow_code, "node_id": node_id, "node_type": node_type, "config": config or None}


def edge(flow: str, a: str, b: str, *, outcome: str | None = None, condition: str | None = None,
         priority: int = 100) -> dict[str, Any]:
    row: dict[str, Any] = {"flow_code": flow, "from_node": a, "to_node": b, "priority": priority}
    if outcome:
        row["outcome"] = outcome
    if condition:
        row["condition"] = condition
    return row


def chain(flow: str, *ids: str) -> list[dict[str, Any]]:
    return [edge(flow, a, b) for a, b in pairwise(ids)]


LOAN_NODES = [
    node("LOAN", "start", "start"),
    node("LOAN", "ask_amount", "entity", variable="amount", type="number", prompt="How much would you like to borrow?",
         reprompts=["Please give the amount as a number.", "A number like 5000, please."], max_attempts=3,
         capture={"pattern": r"(\d[\d,]*)"}),
    node("LOAN", "check", "decision"),
    node("LOAN", "big", "message", text="{{ session.amount }} is a large loan; an officer will review it."),
    node("LOAN", "small", "message", text="Approved in principle: {{ session.amount }}."),
    node("LOAN", "done", "end"),
    node("LOAN", "human", "handoff", text="Let me connect you with a loan officer."),
    node("LOAN", "after_human", "message", text="Welcome back to the bot."),
]
LOAN_EDGES = [
    *chain("LOAN", "start", "ask_amount", "check"),
    edge("LOAN", "ask_amount", "human", outcome="escalate"),
    edge("LOAN", "check", "big", condition="session.amount >= 10000", priority=1),
    edge("LOAN", "check", "small"),
    edge("LOAN", "big", "done"), edge("LOAN", "small", "done"),
    edge("LOAN", "human", "after_human"), edge("LOAN", "after_human", "ask_amount"),
]
GREET_NODES = [node("GREET", "start", "start"), node("GREET", "hello", "message", text="Hello! How can I help?"),
               node("GREET", "end", "end")]
GREET_EDGES = chain("GREET", "start", "hello", "end")
WELCOME_NODES = [node("WELCOME", "start", "start"),
                 node("WELCOME", "hi", "message", text="Hi, I am the loan assistant.",
                      blocks=[{"type": "buttons", "options": ["loan", "hello"]}]),
                 node("WELCOME", "end", "end")]
WELCOME_EDGES = chain("WELCOME", "start", "hi", "end")


def flows_pack(*, nodes: list[dict[str, Any]] | None = None, edges: list[dict[str, Any]] | None = None,
               flows: list[dict[str, Any]] | None = None, **settings: Any) -> dict[str, Any]:
    """BASE_PACK plus the loan, greeting and welcome flows (and any extra rows)."""
    return pack(
        settings={"flows": {"welcome-flow": "WELCOME", **settings}},
        ce_flow=[{"flow_code": "LOAN", "intent_code": "LOAN", "description": "loan form"},
                 {"flow_code": "GREET", "intent_code": "GREETING", "description": "greeting"},
                 {"flow_code": "WELCOME", "description": "welcome"}, *(flows or [])],
        ce_flow_node=[*LOAN_NODES, *GREET_NODES, *WELCOME_NODES, *(nodes or [])],
        ce_flow_edge=[*LOAN_EDGES, *GREET_EDGES, *WELCOME_EDGES, *(edges or [])],
    )
