"""A run paused at a ``human`` step survives the server process: killed (SIGKILL), started again, the run
is resumed over HTTP and completes, every step persisted once (a real ``convengine serve`` process)."""

from __future__ import annotations

from pathlib import Path

import httpx
import sqlalchemy as sa

from convengine.db import create_sync_engine, parse_database_url
from tests.conftest import EXAMPLES
from tests.http_stub import http_server
from tests.servers import Server

PACK = EXAMPLES / "chains_approvals.yaml"


def _step_rows(url: str, run_id: str) -> list[tuple[int, str, str]]:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(
                "SELECT seq, step_id, status FROM ce_chain_run_step WHERE run_id = :r ORDER BY seq"), {"r": run_id})]
    finally:
        engine.dispose()


def test_a_paused_run_survives_a_killed_server_and_completes_once(db_url: str, tmp_path: Path) -> None:
    with http_server(lambda path, body: (200, {"id": "R-9", "amount": body["amount"]})) as payments:
        env = {"PACK_PAYMENTS_URL": payments.url, "CONVENGINE_MCP__HTTP_API__ALLOWED_HOSTS": '["127.0.0.1"]'}
        first = Server(db_url, tmp_path / "first.log", pack=PACK, env=env)
        try:
            started = httpx.post(f"{first.base}/api/v1/chains/runs", json={"chain": "REFUND", "input": {"order": "A7", "amount": 300}},
                                 timeout=30)
            assert started.status_code == 200, started.text
            run = started.json()
            assert (run["status"], run["currentStep"]) == ("WAITING", "approve")
        finally:
            first.kill()
        second = Server(db_url, tmp_path / "second.log", pack=None, env=env)
        try:
            base = second.base
            waiting = httpx.get(f"{base}/api/v1/chains/runs/{run['runId']}", timeout=30).json()
            assert waiting["status"] == "WAITING"
            resumed = httpx.post(f"{base}/api/v1/chains/runs/{run['runId']}/resume",
                                 json={"answer": {"approved": True}}, timeout=30)
            assert resumed.status_code == 200, resumed.text
            done = resumed.json()
            assert done["status"] == "COMPLETED", done
            assert done["output"]["done"]["text"] == "Refund R-9 sent for order A7."
            again = httpx.post(f"{base}/api/v1/chains/runs/{run['runId']}/resume", json={"answer": {}}, timeout=30)
            assert again.status_code == 422 and again.json()["errorCode"] == "CHAIN_RUN_NOT_PAUSED"
        finally:
            second.stop()
        assert _step_rows(db_url, run["runId"]) == [(0, "ask", "DONE"), (1, "check", "DONE"), (2, "approve", "DONE"),
                                                   (3, "approved", "DONE"), (4, "pay", "DONE"), (5, "done", "DONE")]
        assert len(payments.requests) == 1 and payments.requests[0]["body"] == {"order": "A7", "amount": "300"}
