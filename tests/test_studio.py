"""LangGraph Studio: `langgraph dev` serves the graph offline from langgraph.json, and a turn runs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from convengine.engine import Engine

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_langgraph_dev_serves_the_graph_offline(tmp_path: Path) -> None:
    cli = shutil.which("langgraph", path=str(Path(os.sys.executable).parent))
    assert cli, "langgraph-cli is part of the dev extras"
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["graphs"]["convengine"] == "./convengine/studio.py:graph"
    config["dependencies"] = [str(ROOT)]
    config["graphs"] = {name: str(ROOT / spec.split(":")[0]) + ":" + spec.split(":")[1]  # every graph, from here
                        for name, spec in config["graphs"].items()}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
           "CONVENGINE_DATABASE_URL": f"sqlite:///{tmp_path / 'studio.db'}"}
    log = (tmp_path / "dev.log").open("w")
    server = subprocess.Popen([cli, "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)],
                              cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(base + "/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "dev.log").read_text()
            time.sleep(0.3)
        with httpx.Client(base_url=base, timeout=60) as client:
            assistants = client.post("/assistants/search", json={"graph_id": "convengine"}).json()
            assert assistants and assistants[0]["graph_id"] == "convengine"
            chains = client.post("/assistants/search", json={"graph_id": "chain"}).json()
            assert chains and chains[0]["graph_id"] == "chain"  # the chain runs' graph loads beside it
            thread = client.post("/threads", json={}).json()["thread_id"]
            first = client.post(f"/threads/{thread}/runs/wait",
                                json={"assistant_id": "convengine", "input": {"turn_input": {"text": "hello"}}}).json()
            assert (first["intent"], first["state"]) == ("GREETING", "IDLE"), first
            assert first["payload"]["value"].startswith("Hello!")
            second = client.post(f"/threads/{thread}/runs/wait", json={
                "assistant_id": "convengine", "input": {"turn_input": {"text": "I want to cancel my order"}}}).json()
            assert (second["intent"], second["state"], second["turn"]) == ("CANCEL_ORDER", "ASK_REASON", 2)
            drawn = client.get(f"/assistants/{assistants[0]['assistant_id']}/graph").json()
            assert {"intent_resolution", "mcp_planner", "mcp_tool_call"} <= {n["id"] for n in drawn["nodes"]}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    db = sa.create_engine(f"sqlite:///{tmp_path / 'studio.db'}")
    with db.connect() as conn:
        users = [r[0] for r in conn.execute(sa.text("SELECT user_input FROM ce_conversation_history "
                                                    "WHERE conversation_id = :c ORDER BY history_id"), {"c": thread})]
    db.dispose()
    assert users == ["hello", "I want to cancel my order"]  # each Studio run is recorded like a turn
    # Studio's checkpoints live in its own server; the engine adopts the conversation from its rows
    with Engine.open(f"sqlite:///{tmp_path / 'studio.db'}") as engine:
        third = engine.process("it arrived damaged", thread)
        assert (third.intent, third.state, third.turn) == ("CANCEL_ORDER", "CONFIRM", 3)
        assert [h["user_input"] for h in engine.history(thread)][-1] == "it arrived damaged"
