"""The example pack: its conversation tests, and the whole loan flow against a live quote service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convengine.testing import run_file
from tests.helpers import engine_on, payload_of, turn_events
from tests.http_stub import http_server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PACK = EXAMPLES / "flows_assistant.yaml"


def test_conversation_tests_pass(db_url: str) -> None:
    outcomes = run_file(EXAMPLES / "flows_assistant.conv.yaml", url=db_url)
    failures = [f"{o.name}: {t.index}: {t.failures}" for o in outcomes for t in o.turns if t.failures]
    assert not failures and all(o.error is None for o in outcomes), failures or [o.error for o in outcomes]
    assert sum(len(o.turns) for o in outcomes) == 13


@pytest.mark.asyncio
async def test_quote_service_python_subflow_and_decision(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def reply(path: str, body: Any) -> tuple[int, Any]:
        return 200, {"rate": 6.0, "amount": body["amount"]}

    with http_server(reply) as stub:
        monkeypatch.setenv("PACK_QUOTE_API_URL", stub.url)
        async with engine_on(db_url, str(PACK), mcp={"http_api": {"allowed_hosts": ["127.0.0.1"]}}) as engine:
            cid = (await engine.astart()).conversation_id
            await engine.aprocess("I want a loan", cid)
            await engine.aprocess("10000", cid)
            offer = await engine.aprocess("12 months", cid)
            assert offer.text == "At 6.0% that is 860.66 a month.\nShall I submit it? (yes or no)"
            assert stub.requests[0]["body"] == {"amount": "10000", "term": "12"}
            assert payload_of(await turn_events(engine, cid), "FLOW_SCRIPT_RAN")["stdout"] == "payment 860.66\n"
            done = await engine.aprocess("yes, go ahead", cid)
            assert done.text == "Submitted. We will be in touch."
            state = (await engine.astate(cid))["flow"]
            assert state["stack"] == [] and state["vars"]["confirmed"] is True
            cid2 = (await engine.astart()).conversation_id
            for text in ("a loan", "5000", "6"):
                await engine.aprocess(text, cid2)
            assert (await engine.aprocess("no", cid2)).text == "No problem, nothing was submitted."
