"""Flows are drawn as LangGraph subgraphs of the turn graph's ``flow`` step (Studio's view)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from convengine.flows.display import attach_flows
from tests.flows.packs import flows_pack
from tests.helpers import engine_on

ROOT = Path(__file__).resolve().parents[2]


def drawn(graph: object) -> tuple[set[str], set[tuple[str, str]]]:
    view = graph.get_graph(xray=True)  # type: ignore[attr-defined]
    return set(view.nodes), {(e.source, e.target) for e in view.edges}


@pytest.mark.asyncio
async def test_each_flow_is_a_subgraph_with_one_node_per_flow_node_and_turns_run_unchanged(db_url: str) -> None:
    async with engine_on(db_url, flows_pack()) as engine:
        graph = attach_flows(engine.graph, engine.snapshot)
        nodes, edges = drawn(graph)
        for code, node_ids in {"LOAN": ("start", "ask_amount", "check", "big", "small", "done", "human", "after_human"),
                               "GREET": ("start", "hello", "end"), "WELCOME": ("start", "hi", "end")}.items():
            assert {f"flow:{code}:{n}" for n in node_ids} <= nodes
        assert ("flow:LOAN:ask_amount", "flow:LOAN:human") in edges  # the escalation edge
        assert ("flow:LOAN:check", "flow:LOAN:big") in edges
        assert "flow" not in nodes and "intent_resolution" in nodes  # the step is drawn as its flows
        assert "flow" in set(graph.get_graph().nodes)  # without xray the step is one node
        first = await engine.astart()  # the drawn graph still runs flow turns
        asked = await engine.aprocess("I want a loan", first.conversation_id)
        assert asked.text == "How much would you like to borrow?"


def test_studio_graph_draws_the_studio_packs_flows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVENGINE_STUDIO_PACK", str(ROOT / "examples" / "flows_assistant.yaml"))
    from convengine import studio

    try:
        nodes, edges = drawn(importlib.reload(studio).graph)
        assert {"flow:LOAN:ask_amount", "flow:LOAN:human", "flow:GREET:hello", "flow:WELCOME:hello"} <= nodes
        assert ("flow:LOAN:ask_amount", "flow:LOAN:human") in edges
        monkeypatch.setenv("CONVENGINE_STUDIO_PACK", str(ROOT / "examples" / "support_desk.yaml"))
        nodes, _ = drawn(importlib.reload(studio).graph)
        assert not {n for n in nodes if n.startswith("flow:")} and "flow" in nodes  # a pack without flows
    finally:
        monkeypatch.delenv("CONVENGINE_STUDIO_PACK")
        importlib.reload(studio)
