"""examples/chains_approvals.yaml runs as its comments say, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from convengine.catalog import stages
from convengine.chains import Chains
from tests.conftest import EXAMPLES
from tests.helpers import engine_on
from tests.http_stub import http_server

PACK = EXAMPLES / "chains_approvals.yaml"
ALLOW_LOOPBACK = {"mcp": {"http_api": {"allowed_hosts": ["127.0.0.1"]}}}


async def test_refunds_small_large_and_refused(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with http_server(lambda path, body: (200, {"id": f"R-{body['order']}"})) as payments:
        monkeypatch.setenv("PACK_PAYMENTS_URL", payments.url)
        async with engine_on(db_url, PACK, settings=ALLOW_LOOPBACK) as engine:
            chains = Chains(engine)
            small = await chains.astart("REFUND", {"order": "S1", "amount": 40})
            assert small.status == "COMPLETED"
            assert [s["step"] for s in small.steps] == ["ask", "check", "pay", "done"]
            assert small.output["done"]["text"] == "Refund R-S1 sent for order S1."
            assert small.output["ask"]["reply"] == "A refund request was opened for your order."

            large = await chains.astart("REFUND", {"order": "L1", "amount": 900})
            assert (large.status, large.current_step) == ("WAITING", "approve")
            refused = await chains.aresume(large.run_id, {"approved": False})
            assert [s["step"] for s in refused.steps] == ["ask", "check", "approve", "approved", "refused"]
            assert refused.output["refused"]["text"] == "The refund for order L1 was not approved."
            assert [r["body"]["order"] for r in payments.requests] == ["S1"]  # the refused refund paid nothing
            trail = [e.stage for e in await engine.aaudit(refused.conversation_id)]
            assert trail.count(stages.CHAIN_NOTIFY) == 1 and stages.CHAIN_WAITING in trail


async def test_the_reminder_fires_when_due(db_url: str) -> None:
    async with engine_on(db_url, PACK) as engine:
        chains = Chains(engine)
        run = await chains.astart("REMIND", {"name": "Ana"})
        assert run.status == "SCHEDULED"
        fired = await chains.arun_due()
        assert [r.run_id for r in fired] == [run.run_id]
        assert fired[0].output["remind"]["text"] == "Reminder for Ana: your refund is on its way."
