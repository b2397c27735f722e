"""A chain in LangGraph Studio: ``chain`` of convengine/studio.py (named in langgraph.json) draws the chain's
steps and runs a thread as a chain run, its human step an interrupt Studio resumes."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from convengine.db import create_sync_engine, parse_database_url
from tests.conftest import EXAMPLES
from tests.http_stub import http_server

ROOT = Path(__file__).resolve().parents[2]


def test_langgraph_json_names_the_chain_graph() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["graphs"]["chain"] == "./convengine/studio.py:chain"


async def test_a_studio_thread_runs_the_chain_and_resumes_its_human_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'chains.db'}"
    monkeypatch.setenv("CONVENGINE_STUDIO_CHAIN_PACK", str(EXAMPLES / "chains_approvals.yaml"))
    monkeypatch.setenv("CONVENGINE_STUDIO_CHAIN_DATABASE_URL", url)
    monkeypatch.setenv("CONVENGINE_STUDIO_CHAIN", "REFUND")
    monkeypatch.setenv("CONVENGINE_MCP__HTTP_API__ALLOWED_HOSTS", '["127.0.0.1"]')
    from convengine import studio

    studio = importlib.reload(studio)
    assert studio.chain is not None
    drawn = set(studio.chain.get_graph().nodes)
    assert {"ask", "check", "approve", "approved", "pay", "done", "refused"} <= drawn
    graph = studio.chain.builder.compile(checkpointer=InMemorySaver())  # what the Studio server does
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread}}
    with http_server(lambda path, body: (200, {"id": "R-5"})) as payments:
        monkeypatch.setenv("PACK_PAYMENTS_URL", payments.url)
        try:
            first = await graph.ainvoke({"input": {"order": "A1", "amount": 300}}, config)  # Studio's input
            assert first["__interrupt__"][0].value["step"] == "approve"
            done = await graph.ainvoke(Command(resume={"approved": True}), config)
        finally:
            engine = studio._chain_engine
            if engine is not None:
                await engine.aclose()
            studio._chain_engine = None
            studio._chain_runs.clear()
    assert done["outputs"]["done"]["text"] == "Refund R-5 sent for order A1."
    db = create_sync_engine(parse_database_url(url))
    try:
        with db.connect() as conn:
            rows = conn.execute(sa.text("SELECT step_id, status FROM ce_chain_run_step WHERE run_id = :r ORDER BY seq"),
                                {"r": thread}).all()
            status = conn.execute(sa.text("SELECT status, trigger FROM ce_chain_run WHERE run_id = :r"),
                                  {"r": thread}).one()
    finally:
        db.dispose()
    assert [tuple(r) for r in rows] == [("ask", "DONE"), ("check", "DONE"), ("approve", "DONE"), ("approved", "DONE"),
                                        ("pay", "DONE"), ("done", "DONE")]
    assert tuple(status) == ("COMPLETED", "studio")
