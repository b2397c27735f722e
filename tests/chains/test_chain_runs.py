"""Chain runs through the Python API, on SQLite and PostgreSQL: every step type, pauses and resumes,
each step persisted once, the audit trail and the live stream of the run's conversation."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from convengine.catalog import stages
from convengine.catalog.errors import (
    ChainRunNotFoundError,
    ChainRunNotPausedError,
    ConfigValidationError,
    InvalidInputError,
)
from convengine.chains import Chains
from convengine.chains.store import now
from convengine.config_loader import validate_pack
from convengine.llm.scripted import ScriptedLLM
from tests.chains.support import chain_pack, step
from tests.helpers import engine_on
from tests.http_stub import http_server


def _audit(events: list[Any]) -> list[str]:
    return [e.stage for e in events]


async def test_a_human_step_pauses_the_run_until_a_person_answers(db_url: str) -> None:
    data = chain_pack(step("hello", "assistant", message="hello"),
                      step("ask", "human", prompt="Approve {{ input.amount }}?"),
                      step("route", "decide", branches=[{"when": "steps.ask.answer.ok == true", "goto": "yes"}],
                           otherwise="no"),
                      step("yes", "notify", text="approved {{ input.amount }}", next="end"),
                      step("no", "notify", text="refused"))
    async with engine_on(db_url, data) as engine:
        chains = Chains(engine)
        run = await chains.astart("C", {"amount": 120}, owner="key:a")
        assert (run.status, run.current_step) == ("WAITING", "ask")
        assert [(s["step"], s["status"]) for s in run.steps] == [("hello", "DONE"), ("ask", "WAITING")]
        assert run.steps[0]["output"]["reply"] == "Hello there"  # the pack's assistant answered the turn
        with pytest.raises(ChainRunNotFoundError):  # another caller's run is not there for it
            await chains.aget(run.run_id, owner="key:b")
        done = await chains.aresume(run.run_id, {"ok": True})
        assert done.status == "COMPLETED"
        assert [(s["seq"], s["step"], s["status"]) for s in done.steps] == [
            (0, "hello", "DONE"), (1, "ask", "DONE"), (2, "route", "DONE"), (3, "yes", "DONE")]
        assert done.steps[1]["output"] == {"prompt": "Approve 120?", "answer": {"ok": True}}
        assert done.output["yes"]["text"] == "approved 120"
        with pytest.raises(ChainRunNotPausedError):
            await chains.aresume(run.run_id, {"ok": False})
        trail = _audit(await engine.aaudit(run.conversation_id))
        assert trail[0] == stages.CHAIN_RUN_STARTED and trail[-1] == stages.CHAIN_RUN_COMPLETED
        assert stages.CHAIN_WAITING in trail and stages.CHAIN_RESUMED in trail and stages.CHAIN_NOTIFY in trail
        assert [r.run_id for r in await chains.aruns(owner="key:a")] == [run.run_id]
        assert await chains.aruns(owner="key:b") == []


async def test_a_decide_branch_skips_the_human_step(db_url: str) -> None:
    data = chain_pack(step("route", "decide", branches=[{"when": "number(input.amount) > 100", "goto": "ask"}]),
                      step("small", "notify", text="small", next="end"),
                      step("ask", "human", prompt="big?"))
    async with engine_on(db_url, data) as engine:
        run = await Chains(engine).astart("C", {"amount": "20"})
        assert run.status == "COMPLETED"
        assert [s["step"] for s in run.steps] == ["route", "small"]


async def test_notify_reaches_the_conversation_stream_live(db_url: str) -> None:
    data = chain_pack(step("wait", "human", prompt="go?"), step("tell", "notify", text="hi {{ input.name }}",
                                                              data={"n": "{{ input.name }}"}))
    async with engine_on(db_url, data) as engine:
        chains = Chains(engine)
        run = await chains.astart("C", {"name": "Ana"})
        subscription = engine.subscribe(run.conversation_id)
        try:
            await chains.aresume(run.run_id, "yes")
            seen = []
            while not subscription.queue.empty():
                seen.append(subscription.queue.get_nowait())
        finally:
            engine.bus.unsubscribe(subscription)
        notify = [e for e in seen if e.stage == stages.CHAIN_NOTIFY]
        assert len(notify) == 1 and notify[0].payload["text"] == "hi Ana" and notify[0].payload["data"] == {"n": "Ana"}
        stored = [e for e in await engine.aaudit(run.conversation_id) if e.stage == stages.CHAIN_NOTIFY]
        assert stored[0].payload["runId"] == run.run_id


async def test_a_schedule_step_waits_until_due_and_run_due_fires_it(db_url: str) -> None:
    data = chain_pack(step("later", "schedule", delay_s=3600), step("tell", "notify", text="time"))
    async with engine_on(db_url, data) as engine:
        chains = Chains(engine)
        run = await chains.astart("C")
        assert run.status == "SCHEDULED" and run.due_at is not None
        assert await chains.arun_due() == []  # not due yet
        await chains.store.update_run(run.run_id, due_at=now() - timedelta(seconds=1))
        fired = await chains.arun_due()
        assert [r.status for r in fired] == ["COMPLETED"]
        assert fired[0].steps[0]["output"]["dueAt"] is not None and fired[0].steps[0]["output"]["firedAt"]
        assert await chains.arun_due() == []


async def test_a_webhook_calls_an_allow_listed_host_with_a_secret_from_the_environment(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with http_server(lambda path, body: (200, {"id": "R-1", "got": body})) as stub:
        monkeypatch.setenv("PACK_HOOK_URL", stub.url)
        monkeypatch.setenv("PACK_HOOK_TOKEN", "s3cret-token-value")
        data = chain_pack(step("pay", "webhook", url="${env:PACK_HOOK_URL}/refunds",
                               headers={"Authorization": "Bearer ${env:PACK_HOOK_TOKEN}"},
                               body={"order": "{{ input.order }}"}),
                          step("tell", "notify", text="refund {{ steps.pay.response.id }}"),
                          settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"]}}})
        async with engine_on(db_url, data) as engine:
            run = await Chains(engine).astart("C", {"order": "A1"})
            assert run.status == "COMPLETED", run.error
            assert stub.requests[0]["path"] == "/refunds" and stub.requests[0]["body"] == {"order": "A1"}
            assert stub.requests[0]["headers"]["Authorization"] == "Bearer s3cret-token-value"
            assert run.output["tell"]["text"] == "refund R-1"
            trail = await engine.aaudit(run.conversation_id)
            assert "s3cret-token-value" not in repr([e.payload for e in trail]) + repr(run.to_dict())


async def test_a_failing_step_fails_the_run_and_says_which_step(db_url: str) -> None:
    data = chain_pack(step("pay", "webhook", url="http://127.0.0.1:9/x", retries=0, timeout_ms=500),
                      settings={"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"]}}})
    async with engine_on(db_url, data) as engine:
        run = await Chains(engine).astart("C")
        assert run.status == "FAILED" and "chain C step pay" in (run.error or "")
        assert [(s["step"], s["status"]) for s in run.steps] == [("pay", "FAILED")]


async def test_an_agent_step_plans_with_the_model_and_calls_its_own_tool(db_url: str) -> None:
    llm = ScriptedLLM({"MCP_PLANNER": [
        {"action": "CALL_TOOL", "tool_code": "lookup", "args": {"order": "A1"}, "answer": None, "operation_tag": "R"},
        {"action": "ANSWER", "tool_code": None, "args": {}, "answer": "Order A1 shipped.", "operation_tag": "R"}]})
    data = chain_pack(step("think", "agent", instructions="Answer about orders.", input="where is {{ input.order }}",
                           tools=["lookup"], max_steps=3))
    data["ce_mcp_tool"] = [{"tool_code": "lookup", "tool_group": "CALCULATOR_TRANSFORM", "description": "order status"}]
    async with engine_on(db_url, data, llm=llm, tools={"lookup": lambda args: {"status": "shipped"}}) as engine:
        run = await Chains(engine).astart("C", {"order": "A1"})
        assert run.status == "COMPLETED", run.error
        assert run.output["think"]["answer"] == "Order A1 shipped."
        assert "shipped" in run.output["think"]["tools"][0]["result"]


def test_publish_validation_names_chain_step_and_rule() -> None:
    bad = chain_pack(step("a", "decide", branches=[{"when": "input.x ==", "goto": "nowhere"}]),
                     step("b", "teleport"), step("c", "schedule"), step("d", "webhook", url="${env:HOME}/x"))
    with pytest.raises(ConfigValidationError) as caught:
        validate_pack(bad)
    text = str(caught.value)
    assert "chain C step a: branches[0].when" in text and "'nowhere'" in text
    assert "chain C step b: unknown step type 'teleport'" in text
    assert "chain C step c: a schedule step needs delay_s" in text
    assert "chain C step d: config.url" in text and "HOME" in text


async def test_bad_input_is_refused_before_anything_is_written(db_url: str) -> None:
    async with engine_on(db_url, chain_pack(step("a", "notify", text="x"))) as engine:
        chains = Chains(engine)
        with pytest.raises(InvalidInputError, match="no enabled chain 'NOPE'"):
            await chains.astart("NOPE")
        with pytest.raises(InvalidInputError, match="not a UUID"):
            await chains.aget("nope")
        assert await chains.aruns() == []


async def test_two_resumes_at_once_resume_the_run_once(db_url: str) -> None:
    data = chain_pack(step("ask", "human", prompt="go?"), step("tell", "notify", text="{{ steps.ask.answer }}"))
    async with engine_on(db_url, data) as engine:
        first, second = Chains(engine, worker="w1"), Chains(engine, worker="w2")
        run = await first.astart("C")
        results = await asyncio.gather(first.aresume(run.run_id, "a"), second.aresume(run.run_id, "b"),
                                       return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["ChainRun", "ChainRunNotPausedError"]
        view = await first.aget(run.run_id)
        assert view.status == "COMPLETED" and [s["step"] for s in view.steps] == ["ask", "tell"]


def test_every_s_is_checked_at_load() -> None:
    bad = chain_pack(step("a", "notify", text="x"))
    bad["ce_chain"][0]["every_s"] = 0
    with pytest.raises(ConfigValidationError, match="chain C: every_s must be a whole number of seconds"):
        validate_pack(bad)


async def test_forgetting_a_user_with_their_conversations_erases_their_chain_runs_and_paused_state(db_url: str) -> None:
    data = chain_pack(step("ask", "human", prompt="Approve {{ input.amount }}?"), step("tell", "notify", text="ok"))
    async with engine_on(db_url, data) as engine:
        cid = (await engine.aprocess("hello", user_id="alice")).conversation_id
        chains = Chains(engine)
        paused = await chains.astart("C", {"amount": 120}, conversation_id=cid)
        other = await chains.astart("C", {"amount": 5})  # another conversation, nobody's user
        assert paused.status == other.status == "WAITING"
        thread = {"configurable": {"thread_id": f"chain:{paused.run_id}"}}
        assert await engine.graph.checkpointer.aget_tuple(thread) is not None
        erased = await engine.aforget_user("alice", conversations=True)
        assert erased["conversations"] == 1
        with pytest.raises(ChainRunNotFoundError):
            await chains.aget(paused.run_id)
        assert await engine.graph.checkpointer.aget_tuple(thread) is None  # its paused state is gone too
        assert (await chains.aget(other.run_id)).status == "WAITING"  # another conversation's run stays
