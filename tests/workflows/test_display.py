"""Workflows are drawn in LangGraph Studio (subgraphs of the ``flow`` step) and in the console."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_studio_draws_the_workflows_of_its_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVENGINE_STUDIO_PACK", str(ROOT / "examples" / "workflows_assistant.yaml"))
    from convengine import studio

    try:
        view = importlib.reload(studio).graph.get_graph(xray=True)
        nodes, edges = set(view.nodes), {(e.source, e.target) for e in view.edges}
        assert {"flow:SUPPORT:route", "flow:SUPPORT:order", "flow:ORDER_STATUS:lookup"} <= nodes
        assert ("flow:SUPPORT:route", "flow:SUPPORT:faq") in edges
        assert ("flow:ORDER_STATUS:lookup", "flow:ORDER_STATUS:unknown") in edges  # the tool's error edge
    finally:
        monkeypatch.delenv("CONVENGINE_STUDIO_PACK")
        importlib.reload(studio)


@pytest.mark.asyncio
async def test_the_console_draws_the_workflows(db_url: str) -> None:
    import xml.etree.ElementTree as ET

    from tests.console.support import console_app
    from tests.servers import in_process

    svg_ns = "{http://www.w3.org/2000/svg}"
    async with in_process(console_app(db_url, pack=ROOT / "examples" / "workflows_assistant.yaml")) as client:
        reply = await client.get("/console/api/config/workflows.svg")
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("image/svg+xml")
        svg = ET.fromstring(reply.text)
        nodes = {g.get("data-node") for g in svg.iter(f"{svg_ns}g")}
        assert {"SUPPORT/route: router", "SUPPORT/order: workflow", "ORDER_STATUS/lookup: tool",
                "ORDER_STATUS/start: trigger"} <= nodes
        labels = [t.text for t in svg.iter(f"{svg_ns}text")]
        assert "contains(text, 'order')" in labels and "sub-workflow" in labels and "error" in labels
