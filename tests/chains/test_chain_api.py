"""Chains over HTTP with API keys: any caller starts a run (the inbound trigger) and reads its own runs;
resuming a run waiting for a person needs the chains scope (``api.auth.chain_keys``) or an admin key;
the run's notify reaches the conversation's SSE stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from convengine.api.app import create_app
from convengine.catalog import stages
from tests.api.auth_support import ADMIN, USER_A, USER_B, assert_refused, bearer
from tests.chains.support import chain_pack, step
from tests.servers import in_process, read_events

OPERATOR = "operator-key-0123456789abcdef"
SETTINGS = {"api": {"auth": {"api_keys": [USER_A, USER_B], "admin_keys": [ADMIN], "chain_keys": [OPERATOR]}}}


def _pack() -> dict[str, Any]:
    return chain_pack(step("ask", "human", prompt="ok {{ input.order }}?"),
                      step("tell", "notify", text="order {{ input.order }}: {{ steps.ask.answer }}"))


async def test_start_read_and_resume_with_scopes(db_url: str) -> None:
    async with in_process(create_app(db_url, pack=_pack(), settings=SETTINGS)) as client:
        started = await client.post("/api/v1/chains/runs", json={"chain": "C", "input": {"order": "A1"}}, headers=bearer(USER_A))
        assert started.status_code == 200, started.text
        run = started.json()
        assert run["status"] == "WAITING" and run["steps"][0]["output"] is None
        path = f"/api/v1/chains/runs/{run['runId']}"
        assert (await client.get(path, headers=bearer(USER_A))).json()["status"] == "WAITING"
        assert_refused(await client.get(path, headers=bearer(USER_B)), 404, "CHAIN_RUN_NOT_FOUND")
        assert (await client.get("/api/v1/chains/runs", headers=bearer(USER_B))).json() == []
        assert [r["runId"] for r in (await client.get("/api/v1/chains/runs", headers=bearer(OPERATOR))).json()] \
            == [run["runId"]]
        for key in (USER_A, USER_B):
            assert_refused(await client.post(path + "/resume", json={"answer": "yes"}, headers=bearer(key)),
                           403, "FORBIDDEN", "chains scope")
        assert_refused(await client.post(path + "/resume", json={"answer": "yes"}), 401, "UNAUTHORIZED")
        assert_refused(await client.post("/api/v1/chains/runs/not-a-uuid/resume", json={}, headers=bearer(OPERATOR)),
                       422, "INVALID_INPUT")
        assert_refused(await client.post("/api/v1/chains/runs", json={"chain": "NOPE"}, headers=bearer(USER_A)),
                       422, "INVALID_INPUT", "no enabled chain")
        assert_refused(await client.post(path + "/resume", json={"answer": "x" * 70_000}, headers=bearer(OPERATOR)),
                       422, "INVALID_INPUT", "chains.max_answer_bytes")

        events: list[tuple[str, dict[str, Any], float]] = []
        async with client.stream("GET", f"/api/v1/conversation/stream/{run['conversationId']}",
                                 headers=bearer(USER_A)) as stream:
            reader = asyncio.create_task(read_events(stream, stages.CHAIN_RUN_COMPLETED, events))
            await asyncio.sleep(0.3)
            resumed = await client.post(path + "/resume", json={"answer": "yes"}, headers=bearer(OPERATOR))
            await asyncio.wait_for(reader, 30)
        assert resumed.status_code == 200 and resumed.json()["status"] == "COMPLETED", resumed.text
        notify = [json.loads(json.dumps(data)) for name, data, _ in events if name == stages.CHAIN_NOTIFY]
        assert notify and notify[0]["payload"]["text"] == "order A1: yes"
        assert_refused(await client.post(path + "/resume", json={"answer": "again"}, headers=bearer(ADMIN)),
                       422, "CHAIN_RUN_NOT_PAUSED")
        chains = (await client.get("/api/v1/chains", headers=bearer(USER_A))).json()
        assert chains == [{"chain": "C", "description": "a test chain",
                           "steps": [{"step": "ask", "type": "human"}, {"step": "tell", "type": "notify"}]}]


async def test_a_servers_scheduler_fires_a_due_schedule(db_url: str) -> None:
    data = chain_pack(step("later", "schedule", delay_s=0), step("tell", "notify", text="fired"),
                      settings={"chains": {"poll-interval-s": 0.2}})
    async with in_process(create_app(db_url, pack=data)) as client:
        run = (await client.post("/api/v1/chains/runs", json={"chain": "C"})).json()
        assert run["status"] == "SCHEDULED"
        deadline = asyncio.get_running_loop().time() + 60  # generous: a loaded machine polls late
        while True:
            view = (await client.get(f"/api/v1/chains/runs/{run['runId']}")).json()
            if view["status"] == "COMPLETED" or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert view["status"] == "COMPLETED" and [s["step"] for s in view["steps"]] == ["later", "tell"]


async def test_a_resume_of_an_unknown_run_is_not_found(db_url: str) -> None:
    async with in_process(create_app(db_url, pack=_pack())) as client:
        response = await client.post("/api/v1/chains/runs/6f1c1c1e-0000-4000-8000-000000000000/resume", json={})
        assert_refused(response, 404, "CHAIN_RUN_NOT_FOUND")
        assert isinstance(response, httpx.Response)
