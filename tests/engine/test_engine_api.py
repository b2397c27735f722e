"""The Engine's own surface: opening and closing, what a turn returns, following configuration changes
made by other engines (the configuration stamp), feedback and the cache report (both backends)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import warnings
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog import stages
from convengine.catalog.errors import ConfigError, ConvEngineError
from convengine.config_loader import stamp
from convengine.engine import Engine, EngineOptions, Payload, TurnResult
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

JSON_RESPONSE = {"intent_code": "LOAN", "state_code": "START", "output_format": "JSON", "priority": 1,
                 "exact_text": '{"product": "loan", "step": "{{state}}"}'}


# --- opening and closing ---------------------------------------------------------------------------


async def test_a_closed_engine_refuses_every_call_clearly(db_url: str) -> None:
    engine = await asyncio.to_thread(Engine.open, db_url, pack=pack())
    cid = (await asyncio.to_thread(engine.process, "hello")).conversation_id
    with engine:
        pass  # leaving the block closes it
    engine.close()  # a second close is harmless
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no coroutine is left un-awaited
        for call in (lambda: engine.process("hello", cid), lambda: engine.history(cid)):
            with pytest.raises(RuntimeError, match="the engine is closed"):
                await asyncio.to_thread(call)
    async with engine_on(db_url, None) as running:
        assert len(await running.ahistory(cid)) == 1


async def test_an_async_engine_closed_refuses_turns_instead_of_reopening_its_pools(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=pack())
    async with engine:
        cid = (await engine.aprocess("hello")).conversation_id
    await engine.aclose()
    with pytest.raises(RuntimeError, match="the engine is closed"):
        await engine.aprocess("a loan please", cid)
    async with engine_on(db_url, None) as running:
        assert (await running.astate(cid))["turn"] == 1  # nothing ran on the closed engine


async def test_the_engine_describes_its_database(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        assert engine.is_postgres == db_url.startswith("postgresql")
        assert (engine.libpq_url is not None) == engine.is_postgres
        assert engine.database_label.split("://")[0] in ("sqlite", "postgresql", "postgresql+psycopg")


async def test_unsupported_urls_and_table_renaming_are_refused_at_open(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="unsupported database URL 'mysql://h/db'"):
        await Engine.aopen("mysql://h/db")
    with pytest.raises(ConfigError, match="table renaming"):
        await Engine.aopen(f"sqlite:///{tmp_path / 'x.db'}", tables={"conversation": "my_conversation"})


async def test_options_by_name_and_every_other_keyword_as_settings() -> None:
    options = EngineOptions.from_keywords({"pack": "p.yaml", "channel": "beta", "settings": {"llm": {"timeout_s": 5}},
                                           "audit": {"level": "STANDARD"}})
    assert (options.pack, options.channel) == ("p.yaml", "beta")
    assert options.settings == {"llm": {"timeout_s": 5}, "audit": {"level": "STANDARD"}}


# --- what a turn returns ----------------------------------------------------------------------------


async def test_a_result_says_what_the_turn_left_in_the_conversation(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello", input_params={"channel": "web"})
        assert isinstance(first, TurnResult)
        uuid.UUID(first.conversation_id)  # a new conversation gets a UUID
        assert (first.intent, first.state, first.turn, first.status, first.lifecycle) == (
            "GREETING", "IDLE", 1, "RUNNING", "IN_PROGRESS")
        assert first.payload == Payload("TEXT", "Hello there") and first.text == "Hello there"
        state = await engine.astate(first.conversation_id)
        assert (state["intent"], state["state"], state["turn"], state["context"]) == (
            first.intent, first.state, first.turn, first.context)
        history = await engine.ahistory(first.conversation_id)
        assert history[-1]["assistant_output"]["value"] == first.text
        other = await engine.aprocess("hello")
        assert other.conversation_id != first.conversation_id and other.turn == 1


async def test_a_result_is_a_frozen_copy_the_caller_cannot_change_the_conversation_through(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("hello")
        first.context["injected"] = True
        with pytest.raises(dataclasses.FrozenInstanceError):
            first.turn = 99  # type: ignore[misc]
        assert "injected" not in (await engine.astate(first.conversation_id))["context"]
        assert "injected" not in (await engine.aprocess("hello", first.conversation_id)).context


async def test_a_json_answer_is_returned_as_a_value_and_shown_as_text(db_url: str) -> None:
    async with engine_on(db_url, pack(ce_response=[JSON_RESPONSE])) as engine:
        result = await engine.aprocess("a loan please")
        assert result.payload.type == "JSON" and result.payload.value == {"product": "loan", "step": "START"}
        assert result.text == str(result.payload.value)


async def test_a_payload_keeps_its_sources_as_a_tuple() -> None:
    passages = [{"kb": "faq", "source": "a.md", "score": 0.5}]
    assert Payload.from_state({"type": "TEXT", "value": "x", "sources": passages}).sources == tuple(passages)
    assert Payload.from_state({"value": "x"}) == Payload("TEXT", "x", None)


# --- following changes made elsewhere -------------------------------------------------------------


async def wait_past_the_stamp_check() -> None:
    await asyncio.sleep(stamp.CHECK_INTERVAL_S + 0.05)


async def test_a_pack_imported_by_another_engine_is_served_before_the_next_turn(db_url: str) -> None:
    changed = pack()
    changed["ce_response"][0]["exact_text"] = "Welcome back"
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        old = engine.snapshot
        async with engine_on(db_url, changed):  # opening it imports the pack and stamps the change
            pass
        await wait_past_the_stamp_check()
        assert (await engine.aprocess("hello")).text == "Welcome back"
        assert engine.snapshot is not old
        report = await engine.acache_report(warmup=False)
        assert report["cacheProvider"]["configStamp"] == await asyncio.to_thread(stamp.read, engine.runtime.sync_engine)
        assert (await engine.aprocess("hello", cid)).text == "Hello there"  # a conversation stays on its version


async def test_between_checks_the_stamp_is_not_read_and_a_reload_applies_at_once(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    changed = pack()
    changed["ce_response"][0]["exact_text"] = "Welcome back"
    async with engine_on(db_url, pack()) as engine:
        await engine.aprocess("hello")  # the stamp was just checked
        monkeypatch.setattr(stamp, "CHECK_INTERVAL_S", 3600)
        async with engine_on(db_url, changed):
            pass
        assert (await engine.aprocess("hello")).text == "Hello there"  # not checked again yet
        await engine.areload()
        assert (await engine.aprocess("hello")).text == "Welcome back"


async def test_a_change_another_engine_made_that_is_invalid_keeps_the_current_configuration(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        await engine.aprocess("hello")
        current = engine.snapshot
        sync = engine.runtime.sync_engine

        def break_it() -> None:
            with sync.begin() as conn:
                conn.execute(sa.text("UPDATE ce_intent_classifier SET pattern = '(' WHERE intent_code = 'GREETING'"))
                stamp.publish(conn, stamp.new_stamp())

        await asyncio.to_thread(break_it)
        await wait_past_the_stamp_check()
        result = await engine.aprocess("hello")
        assert (result.intent, result.text) == ("GREETING", "Hello there")
        assert engine.snapshot is current


async def test_new_audit_settings_from_another_engine_apply_to_the_next_turn(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        assert stages.STEP_ENTER in [e.stage for e in await engine.aaudit(cid)]
        audit = {"level": "STANDARD", "exclude_stages": ["MCP_USER_*"]}
        async with engine_on(db_url, pack(settings={"audit": audit})):  # stored in ce_config
            pass
        await wait_past_the_stamp_check()
        fresh = (await engine.aprocess("hello")).conversation_id
        await engine.afeedback(fresh, "THUMBS_UP")  # audited outside a turn, by the engine's own filter
        kept = [e.stage for e in await engine.aaudit(fresh)]
        assert stages.USER_INPUT in kept and stages.STEP_ENTER not in kept
        assert stages.MCP_USER_FEEDBACK not in kept


# --- feedback ---------------------------------------------------------------------------------------


async def test_feedback_after_a_failed_turn_is_on_the_last_turn_that_completed(db_url: str) -> None:
    def explode(turn: Any) -> None:
        if turn.user_text == "boom":
            raise RuntimeError("step broke")

    async with engine_on(db_url, pack(), steps=[Step("boom", explode, after="rules")]) as engine:
        cid = (await engine.aprocess("a loan please")).conversation_id
        with pytest.raises(ConvEngineError):
            await engine.aprocess("boom", cid)
        given = await engine.afeedback(cid, "thumbs_up")
        assert (given.intent_code, given.state_code, given.user_query, given.assistant_response) == (
            "LOAN", "START", "a loan please", "Loan started")
        audited = [e for e in await engine.aaudit(cid) if e.stage == stages.MCP_USER_FEEDBACK]
        assert [e.payload["turn"] for e in audited] == [1]


async def test_feedback_is_streamed_live_and_its_audit_follows_the_audit_filter(db_url: str) -> None:
    async with engine_on(db_url, pack(), audit={"exclude_stages": ["MCP_USER_*"]}) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        live = engine.subscribe(cid)
        given = await engine.afeedback(cid, "THUMBS_DOWN", metadata={"why": "rude"})
        streamed = live.queue.get_nowait()
        assert streamed.stage == stages.MCP_USER_FEEDBACK and streamed.payload["feedback_id"] == given.feedback_id
        assert [f.feedback_id for f in await engine.afeedbacks(cid)] == [given.feedback_id]  # stored...
        assert stages.MCP_USER_FEEDBACK not in [e.stage for e in await engine.aaudit(cid)]  # ...but not audited
        engine.bus.unsubscribe(live)


async def test_the_sync_api_gives_and_reads_feedback(db_url: str) -> None:
    engine = await asyncio.to_thread(Engine.open, db_url, pack=pack())
    try:
        cid = (await asyncio.to_thread(engine.process, "hello")).conversation_id
        given = await asyncio.to_thread(lambda: engine.feedback(cid, "THUMBS_UP", message_id="m-1"))
        assert await asyncio.to_thread(engine.feedbacks, cid) == [given]
        assert given.to_dict()["messageId"] == "m-1" and given.to_dict()["conversationId"] == cid
    finally:
        await asyncio.to_thread(engine.close)


# --- the cache report -------------------------------------------------------------------------------


async def test_the_cache_report_counts_what_the_process_holds_right_now(db_url: str) -> None:
    from convengine.db.models import CONTROL_TABLES

    release, entered = asyncio.Event(), asyncio.Event()

    async def hold(turn: Any) -> None:
        if turn.user_text == "hold":
            entered.set()
            await release.wait()

    verbose = [{"verbose_id": n, "intent_code": "ANY", "state_code": "ANY", "step_match": "EXACT",
                "step_value": "ANY", "determinant": "STEP_ENTER", "message": "working", "enabled": n != 3}
               for n in (1, 2, 3)]
    settings = {"audit": {"rate_limit": {"enabled": True, "max_events": 10_000}}}
    async with engine_on(db_url, pack(ce_verbose=verbose), steps=[Step("hold", hold, after="rules")],
                         **settings) as engine:
        idle = (await engine.acache_report(warmup=False))["runtimeCaches"]
        assert idle["ce_conversation_turn_locks"]["nativeEntryCount"] == 0
        assert idle["ce_verbose_publisher"]["nativeEntryCount"] == 2  # the enabled rows
        assert idle["ce_audit_rate_limit_buckets"]["exists"] is True
        turn = asyncio.create_task(engine.aprocess("hold"))
        await asyncio.wait_for(entered.wait(), 10)
        busy = (await engine.acache_report(warmup=False))["runtimeCaches"]
        assert busy["ce_conversation_turn_locks"]["nativeEntryCount"] == 1
        release.set()
        await turn
        after = await engine.acache_report(warmup=False)
        runtime = after["runtimeCaches"]
        assert runtime["ce_conversation_turn_locks"]["nativeEntryCount"] == 0
        assert runtime["ce_audit_rate_limit_buckets"]["nativeEntryCount"] > 10  # one per stage of the turn
        assert after["cacheProvider"]["registeredCacheNames"] == [*CONTROL_TABLES, *runtime]
        assert after["staticCaches"]["ce_verbose"]["enabledCount"] == 2
        assert after["staticCaches"]["ce_verbose"]["listSize"] == 3
