"""Replaying recorded conversations against a draft: exactly the changed conversations and turns are
reported, nothing is called for real, incomplete recordings are listed, and the publish gate refuses
a draft that changes too many conversations unless the changes are accepted (both backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from convengine import Engine
from convengine.catalog.errors import InvalidInputError, ToolError
from convengine.config_loader.companions import pack_options
from convengine.engine.recording import read_recording
from convengine.engine.replay import RecordedTools
from convengine.versions import ReplayChangedError
from tests.console.support import PACK, scripted_model
from tests.helpers import pack

pytestmark = pytest.mark.asyncio

ORDERED = "pizza, coming up!"
CHANGED = "pizza, on its way!"


@asynccontextmanager
async def pizza(db_url: str, **settings: Any) -> AsyncIterator[Engine]:
    engine = await Engine.aopen(db_url, **pack_options(PACK, None), llm=scripted_model(),
                                settings={"llm": {"log_calls": True}, **settings})
    try:
        yield engine
    finally:
        await engine.aclose()


async def record_two(engine: Engine) -> tuple[str, str]:
    """An order (the third turn gets the ordered reply) and a question about the hours."""
    order = (await engine.aprocess("I'd like a pizza")).conversation_id
    await engine.aprocess("when do you close?", order)
    await engine.aprocess("medium", order)
    hours = (await engine.aprocess("when are you open?")).conversation_id
    return order, hours


def changed_pack(folder: Path) -> Path:
    path = folder / "pizza-v2.yaml"
    path.write_text(PACK.read_text(encoding="utf-8").replace(ORDERED, CHANGED), encoding="utf-8")
    return path


async def test_a_draft_changing_one_reply_shows_exactly_that_conversation_and_turn(db_url: str,
                                                                                   tmp_path: Path) -> None:
    async with pizza(db_url) as engine:
        order, hours = await record_two(engine)
        engine.versions.draft(changed_pack(tmp_path), author="ann")
        report = await engine.areplay(last=10)
        assert report.draft and report.version == engine.versions.draft_version
        assert {c.conversation_id for c in report.replayed} == {order, hours} and not report.not_replayable
        [changed] = report.changed
        assert changed.conversation_id == order and changed.turns == 3
        [turn] = changed.diffs
        assert (turn.turn, turn.user) == (3, "medium")
        [difference] = turn.differences
        assert difference.aspect == "reply"
        assert difference.recorded == "One medium pizza, coming up!"
        assert difference.replayed == "One medium pizza, on its way!"
        # the live conversations are untouched: still three turns, on the published version
        assert len(await engine.ahistory(order)) == 3
        assert (await engine.astate(order))["turn"] == 3


async def test_an_unchanged_draft_shows_no_change(db_url: str) -> None:
    async with pizza(db_url) as engine:
        await record_two(engine)
        engine.versions.draft(PACK, author="ann")
        report = await engine.areplay(last=10)
    assert len(report.replayed) == 2 and report.changed == [] and report.not_replayable == []


TOOL = [{"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "CALCULATOR_TRANSFORM", "intent_code": "LOAN",
         "state_code": "ANY", "description": "Look up the customer"}]
LOOKUP = {"tool_request": {"tool_code": "crm.lookup", "args": {"id": "c1"}}}


async def test_a_tool_call_is_answered_from_the_recording_without_calling_the_tool(db_url: str) -> None:
    calls: list[dict[str, Any]] = []

    def lookup(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"name": "Ada", "id": args["id"]}

    data = pack(ce_mcp_tool=TOOL)
    engine = await Engine.aopen(db_url, pack=data, replace=True, tools={"crm.lookup": lookup})
    try:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("look it up", cid, input_params=LOOKUP)
        assert len(calls) == 1
        engine.versions.draft(data, author="ann")
        same = await engine.areplay(last=5)
        other = dict(data, ce_response=[dict(r) for r in data["ce_response"]])
        other["ce_response"][1]["exact_text"] = "Loan opened"
        engine.versions.draft(other, author="ann")
        changed = await engine.areplay(last=5)
    finally:
        await engine.aclose()
    assert len(calls) == 1  # the replays never called the tool
    assert [c.conversation_id for c in same.replayed] == [cid] and same.changed == []
    [conversation] = changed.changed
    assert [(d.turn, [x.aspect for x in d.differences]) for d in conversation.diffs] == [(1, ["reply"]), (2, ["reply"])]


async def test_a_tool_call_the_recording_cannot_answer_fails_in_the_replay(db_url: str) -> None:
    calls: list[dict[str, Any]] = []

    def lookup(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"name": "Ada"}

    engine = await Engine.aopen(db_url, pack=pack(ce_mcp_tool=TOOL), replace=True, tools={"crm.lookup": lookup})
    try:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("look it up", cid, input_params=LOOKUP)
        [_, recorded] = await read_recording(engine, engine.runtime.store.engine, cid)
    finally:
        await engine.aclose()
    tools = RecordedTools()
    tools.load(recorded)
    with pytest.raises(ToolError, match="no result of tool crm.lookup with these arguments"):
        tools.handler("crm.lookup")({"id": "c2"})  # other arguments than recorded
    assert tools.handler("crm.lookup")({"id": "c1"}) == {"name": "Ada"}
    with pytest.raises(ToolError):
        tools.handler("crm.lookup")({"id": "c1"})  # each recorded result answers once
    assert len(calls) == 1  # only the recorded call reached the tool


async def test_an_incomplete_recording_is_listed_as_not_replayable(db_url: str) -> None:
    async with pizza(db_url, llm={"log_calls": False}) as engine:
        cid = (await engine.aprocess("I'd like a pizza")).conversation_id
        report = await engine.areplay(last=10)
    assert report.replayed == []
    [missing] = report.not_replayable
    assert missing.conversation_id == cid and "llm.log_calls" in missing.reason


async def test_the_selection_filters_by_intent_and_feedback(db_url: str) -> None:
    async with pizza(db_url) as engine:
        order, hours = await record_two(engine)
        intent = (await engine.astate(order))["intent"]
        assert intent != (await engine.astate(hours))["intent"]
        by_intent = await engine.areplay(last=10, intent=intent)
        latest = await engine.areplay(last=1)
        none_down = await engine.areplay(last=10, feedback="down")
        await engine.afeedback(hours, "THUMBS_DOWN")
        down = await engine.areplay(last=10, feedback="down")
        published = engine.versions.published_version
        ran_on = await engine.areplay(last=10, ran_on=published)
        engine.versions.draft(PACK, author="ann")
        ran_on_draft = await engine.areplay(last=10, ran_on=engine.versions.draft_version)
        now = datetime.now(UTC)
        future = await engine.areplay(last=10, since=now + timedelta(hours=1))
        window = await engine.areplay(last=10, since=now - timedelta(hours=1), until=now + timedelta(hours=1))
        with pytest.raises(InvalidInputError, match="last"):
            await engine.areplay(last=0)
        with pytest.raises(InvalidInputError, match="colour"):
            await engine.areplay(colour="blue")
    assert [c.conversation_id for c in by_intent.replayed] == [order]
    assert [c.conversation_id for c in latest.replayed] == [hours]
    assert none_down.replayed == [] and none_down.not_replayable == []
    assert [c.conversation_id for c in down.replayed] == [hours]
    assert {c.conversation_id for c in ran_on.replayed} == {order, hours} and ran_on_draft.replayed == []
    assert future.replayed == [] and {c.conversation_id for c in window.replayed} == {order, hours}


async def test_the_publish_gate_refuses_past_its_threshold_and_names_the_conversations(db_url: str,
                                                                                       tmp_path: Path) -> None:
    gate = {"versions": {"replay_gate": {"max_changed": 0, "last": 10}}}
    async with pizza(db_url, **gate) as engine:
        order, _hours = await record_two(engine)
        draft = engine.versions.draft(changed_pack(tmp_path), author="ann")
        published = engine.versions.published_version
        with pytest.raises(ReplayChangedError) as refused:
            await _publish(engine, draft=draft.number, author="ann")
        assert refused.value.code.value == "REPLAY_CHANGED"
        assert refused.value.details["changed"] == [order] and order in refused.value.message
        assert engine.versions.published_version == published  # nothing moved
        done = await _publish(engine, draft=draft.number, author="ann", accept_changes=True)
        assert engine.versions.published_version == draft.number
        history = engine.versions.history("production")
    assert done.action == "PUBLISH"
    assert history[-1]["message"].startswith("accepted replay changes: 1 of 2") and order in history[-1]["message"]


async def test_the_publish_gate_lets_an_unchanged_draft_through(db_url: str) -> None:
    async with pizza(db_url, versions={"replay_gate": {"max_changed": 0, "last": 10}}) as engine:
        await record_two(engine)
        draft = engine.versions.draft(PACK, author="ann")
        await _publish(engine, draft=draft.number, author="ann")
        assert engine.versions.published_version == draft.number


async def _publish(engine: Engine, **kwargs: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(lambda: engine.versions.publish(**kwargs))


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from convengine.cli.app import app

    return CliRunner().invoke(app, list(args))


async def test_the_cli_exits_1_when_something_differs_3_when_not_replayable_0_otherwise(db_url: str,
                                                                                      tmp_path: Path) -> None:
    import asyncio
    import json

    async with pizza(db_url) as engine:
        order, _hours = await record_two(engine)
        published = engine.versions.published_version
        draft = engine.versions.draft(changed_pack(tmp_path), author="ann").number
    differs = await asyncio.to_thread(cli, "pack", "replay", "--url", db_url, "--draft", str(draft), "--last", "10")
    assert differs.exit_code == 1, differs.output
    assert f"changed {order}" in differs.output and "turn 3 ('medium')" in differs.output
    assert "on its way!" in differs.output
    same = await asyncio.to_thread(cli, "pack", "replay", "--url", db_url, "--version", str(published), "--json")
    assert same.exit_code == 0, same.output
    assert json.loads(same.output)["changed"] == []
    async with pizza(db_url, llm={"log_calls": False}) as engine:
        await engine.aprocess("I'd like a pizza")
    missing = await asyncio.to_thread(cli, "pack", "replay", "--url", db_url, "--version", str(published))
    assert missing.exit_code == 3, missing.output
    assert "not replayable" in missing.output and "llm.log_calls" in missing.output


def quote_flow(url: str) -> dict[str, Any]:
    from tests.flows.packs import chain, edge, flows_pack, node

    nodes = [node("SVC", "start", "start"),
             node("SVC", "ask", "entity", variable="term", prompt="For how many months?", type="number"),
             node("SVC", "quote", "service", service_id="quote", method="POST", url=url + "/quotes/{{ session.term }}",
                  body={"term": "{{ session.term }}"}, outputs={"rate": "$.rate"}),
             node("SVC", "say", "message", text="Rate {{ session.rate }}."),
             node("SVC", "oops", "message", text="No quote today."),
             node("SVC", "end", "end")]
    edges = [*chain("SVC", "start", "ask", "quote", "say", "end"), edge("SVC", "quote", "oops", outcome="error"),
             edge("SVC", "oops", "end")]
    data = flows_pack(nodes=nodes, edges=edges,
                      flows=[{"flow_code": "SVC", "intent_code": "GREETING", "priority": 1}])
    data["settings"]["mcp"] = {"http-api": {"allowed-hosts": ["127.0.0.1"]}}
    return data


async def test_a_flow_service_call_is_answered_from_the_recording_without_the_network(db_url: str) -> None:
    from tests.http_stub import http_server

    with http_server(lambda path, body: (200, {"rate": 4.5})) as stub:
        data = quote_flow(stub.url)
        engine = await Engine.aopen(db_url, pack=data, replace=True)
        try:
            cid = (await engine.aprocess("hello")).conversation_id
            assert (await engine.aprocess("24", cid)).text == "Rate 4.5."
            assert len(stub.requests) == 1
            engine.versions.draft(data, author="ann")
            same = await engine.areplay(last=5)
            engine.versions.draft(quote_flow(stub.url + "/v2"), author="ann")
            moved = await engine.areplay(last=5)
        finally:
            await engine.aclose()
        assert len(stub.requests) == 1  # neither replay reached the service
    assert [c.conversation_id for c in same.replayed] == [cid] and same.changed == []
    [conversation] = moved.changed
    [turn] = conversation.diffs
    tools = next(d for d in turn.differences if d.aspect == "tools")
    assert tools.recorded[0]["url"].endswith("/quotes/24") and tools.replayed[0]["url"].endswith("/v2/quotes/24")
    assert turn.turn == 2 and {d.aspect for d in turn.differences} == {"tools", "reply"}
    assert next(d.replayed for d in turn.differences if d.aspect == "reply") == "No quote today."


async def test_a_welcome_event_and_flow_positions_replay_as_recorded(db_url: str) -> None:
    from tests.flows.packs import flows_pack

    data = flows_pack()
    engine = await Engine.aopen(db_url, pack=data, replace=True)
    try:
        cid = (await engine.astart()).conversation_id
        await engine.aprocess("a loan please", cid)
        assert (await engine.aprocess("5000", cid)).text == "Approved in principle: 5000."
        changed = dict(data, ce_flow_node=[dict(n) for n in data["ce_flow_node"]])
        small = next(n for n in changed["ce_flow_node"] if n["node_id"] == "small")
        small["config"] = {"text": "Pre-approved: {{ session.amount }}."}
        engine.versions.draft(changed, author="ann")
        report = await engine.areplay(last=5)
        events = await engine.aaudit(cid)
    finally:
        await engine.aclose()
    assert next(e.payload for e in events if e.stage == "USER_INPUT")["event"] == "welcome"
    [conversation] = report.changed
    assert conversation.turns == 3
    [turn] = conversation.diffs
    assert turn.turn == 3 and [(d.aspect, d.replayed) for d in turn.differences] == [("reply", "Pre-approved: 5000.")]


async def test_cli_publish_is_refused_by_the_replay_gate_until_the_changes_are_accepted(db_url: str,
                                                                                       tmp_path: Path) -> None:
    import asyncio

    gated = tmp_path / "pizza-gated.yaml"
    gate = "settings:\n  versions:\n    replay_gate:\n      max_changed: 0\n      last: 10\n"
    gated.write_text(PACK.read_text(encoding="utf-8").replace("settings:\n", gate, 1), encoding="utf-8")
    engine = await Engine.aopen(db_url, **pack_options(gated, None), llm=scripted_model(),
                                settings={"llm": {"log_calls": True}}, replace=True)
    try:
        assert engine.settings.versions.replay_gate.max_changed == 0
        order, _hours = await record_two(engine)
        changed = tmp_path / "pizza-gated-v2.yaml"
        changed.write_text(gated.read_text(encoding="utf-8").replace(ORDERED, CHANGED), encoding="utf-8")
        draft = engine.versions.draft(changed, author="ann").number
    finally:
        await engine.aclose()
    refused = await asyncio.to_thread(cli, "pack", "publish", "--url", db_url, "--draft", str(draft))
    assert refused.exit_code == 1, refused.output
    assert "REPLAY_CHANGED" in refused.output and order in refused.output
    accepted = await asyncio.to_thread(cli, "pack", "publish", "--url", db_url, "--draft", str(draft),
                                       "--accept-changes")
    assert accepted.exit_code == 0, accepted.output
    assert f"published version {draft}" in accepted.output


async def test_http_publish_gate_answers_409_naming_the_conversations_and_accepts_when_asked(
        db_url: str, tmp_path: Path) -> None:
    from tests.console.support import console_app
    from tests.servers import in_process, post

    app = console_app(db_url, versions={"replay_gate": {"max_changed": 0, "last": 10}})
    async with in_process(app) as client:
        order = (await post(client, "I'd like a pizza"))["conversationId"]
        await post(client, "medium", order)
        await post(client, "when are you open?")
        pack_text = PACK.read_text(encoding="utf-8").replace(ORDERED, CHANGED)
        import yaml

        drafted = await client.post("/api/v1/versions/draft", json={"pack": yaml.safe_load(pack_text)})
        assert drafted.status_code == 201, drafted.text
        draft = drafted.json()["version"]
        replayed = await client.post("/api/v1/versions/replay", json={"last": 10})
        assert replayed.status_code == 200 and replayed.json()["changed"] == [order]
        refused = await client.post("/api/v1/versions/publish", json={"draft": draft})
        assert refused.status_code == 409, refused.text
        assert refused.json()["errorCode"] == "REPLAY_CHANGED"
        assert refused.json()["details"] == [{"changedConversation": order}]
        done = await client.post("/api/v1/versions/publish", json={"draft": draft, "acceptChanges": True})
        assert done.status_code == 200, done.text
        assert done.json()["version"]["version"] == draft


async def test_publishing_on_the_engines_own_loop_with_the_gate_on_says_how_to_publish(db_url: str) -> None:
    from convengine.catalog.errors import ConfigError

    async with pizza(db_url, versions={"replay_gate": {"max_changed": 0}}) as engine:
        draft = engine.versions.draft(PACK, author="ann")
        with pytest.raises(ConfigError, match="asyncio.to_thread"):
            engine.versions.publish(draft=draft.number, author="ann")
        assert engine.versions.published_version != draft.number


async def test_a_tool_call_whose_result_was_not_audited_is_not_replayable(db_url: str) -> None:
    data = pack(ce_mcp_tool=TOOL, settings={"audit": {"exclude_stages": ["TOOL_ORCHESTRATION_RESULT"]}})
    engine = await Engine.aopen(db_url, pack=data, replace=True, tools={"crm.lookup": lambda args: None})
    try:
        complete = (await engine.aprocess("loan")).conversation_id
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("look it up", cid, input_params=LOOKUP)
        report = await engine.areplay(last=5)
    finally:
        await engine.aclose()
    assert [c.conversation_id for c in report.replayed] == [complete]
    [missing] = report.not_replayable
    assert missing.conversation_id == cid
    assert missing.reason == "turn 2 called tool crm.lookup but the audit holds no result for it"


async def test_a_tool_that_returned_null_is_answered_with_null(db_url: str) -> None:
    engine = await Engine.aopen(db_url, pack=pack(ce_mcp_tool=TOOL), replace=True,
                                tools={"crm.lookup": lambda args: None})
    try:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("look it up", cid, input_params=LOOKUP)
        report = await engine.areplay(last=5)
    finally:
        await engine.aclose()
    assert [c.conversation_id for c in report.replayed] == [cid]
    assert report.changed == [] and report.not_replayable == []
