"""The console's data endpoints over HTTP: conversation search, turns, the turn view, configuration,
graphs and the offline /docs, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from tests.console.support import console_app
from tests.servers import in_process, post

pytestmark = pytest.mark.asyncio
SVG = "{http://www.w3.org/2000/svg}"


async def test_search_lists_conversations_by_state_intent_and_id(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        order = (await post(client, "I'd like a pizza"))["conversationId"]
        await post(client, "large please", order)
        hours = (await post(client, "when are you open?", userId="ann"))["conversationId"]
        await client.post("/api/v1/conversation/feedback", json={"conversationId": hours, "feedbackType": "THUMBS_DOWN"})

        async def found(q: str) -> list[str]:
            response = await client.get("/console/api/conversations", params={"q": q})
            assert response.status_code == 200, response.text
            return [row["conversationId"] for row in response.json()]

        assert set(await found("")) == {order, hours}
        assert await found("ordered") == [order]
        assert await found("OPENING_HOURS") == [hours]
        assert await found(order[:8]) == [order]
        assert await found("ann") == [hours]
        assert await found("thumbs_down") == [hours]
        assert await found("%") == []  # a wildcard is matched as text
        rows = (await client.get("/console/api/conversations", params={"q": "ordered"})).json()
        assert (rows[0]["intent"], rows[0]["state"], rows[0]["lastUserText"]) == ("ORDER_PIZZA", "ORDERED", "large please")


async def test_turn_view_shows_steps_rules_llm_prompts_and_state_change(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        await post(client, "large please", cid)
        listed = (await client.get(f"/console/api/conversations/{cid}/turns")).json()["turns"]
        assert [(t["turn"], t["user"], t["after"]["state"], t["undone"]) for t in listed] == [
            (1, "I'd like a pizza", "CHOOSE_SIZE", False), (2, "large please", "ORDERED", False)]
        turn = (await client.get(f"/console/api/conversations/{cid}/turns/2")).json()
        assert (turn["before"]["state"], turn["after"]["state"]) == ("CHOOSE_SIZE", "ORDERED")
        assert turn["reply"] == "One large pizza, coming up!"
        steps = {s["step"]: s for s in turn["steps"]}
        assert steps["reset_conversation"]["status"] == "SKIPPED"
        assert steps["reset_conversation"]["skipped"] == "NO_RESET_TRIGGER"
        extraction = steps["schema_extraction"]
        assert extraction["status"] == "OK" and isinstance(extraction["durationMs"], float)  # the audit's 3 decimals
        assert extraction["durationMs"] > 0 and extraction["stepClass"] == "SchemaExtractionStep"
        assert steps["reset_conversation"]["stepClass"] == "ResetConversationStep"  # skipped: named from the catalogue
        fall = turn["waterfall"]
        ran = [s for s in turn["steps"] if s["status"] != "SKIPPED"]
        assert [b["step"] for b in fall["bars"]] == [s["step"] for s in ran]
        assert fall["bars"][1]["startMs"] == ran[0]["durationMs"]  # one after the other, as they ran
        assert abs(fall["stepsMs"] + fall["engineMs"] - fall["totalMs"]) < 0.01 and fall["engineMs"] >= 0
        assert "SCHEMA_EXTRACTION_LLM_OUTPUT" in [s["stage"] for s in extraction["stages"]]
        applied = [r for r in turn["rules"] if r["kind"] == "RULE_APPLIED"]
        assert [(r["action"], r["actionValue"]) for r in applied] == [("SET_STATE", "ORDERED")]
        [call] = turn["llmCalls"]
        assert (call["callSite"], call["step"], call["ok"], call["logged"]) == (
            "SCHEMA_EXTRACTION", "schema_extraction", True, True)
        assert call["prompt"].endswith("User message: large please") and call["latencyMs"] >= 0
        assert call["reply"] == '{"size": "large"}'
        missing = await client.get(f"/console/api/conversations/{cid}/turns/3")
        assert missing.status_code == 404 and "2 turn(s)" in missing.json()["message"]


async def test_undone_turn_is_marked_in_the_turn_list(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        await post(client, "large please", cid)
        assert (await client.post(f"/api/v1/conversation/{cid}/undo")).status_code == 200
        listed = (await client.get(f"/console/api/conversations/{cid}/turns")).json()["turns"]
        assert [t["undone"] for t in listed] == [False, True]


async def test_configuration_tables_warnings_and_graphs(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        config = (await client.get("/console/api/config")).json()
        rules = config["tables"]["ce_rule"]
        assert [(r["action"], r["action_value"]) for r in rules] == [("SET_STATE", "ORDERED")]
        assert "ORDER_PIZZA" in [r["intent_code"] for r in config["tables"]["ce_intent"]]
        assert config["warnings"] == []
        states = await client.get("/console/api/config/state-graph.svg")
        assert states.headers["content-type"].startswith("image/svg+xml")
        svg = ET.fromstring(states.text)
        nodes = {g.get("data-node") for g in svg.iter(f"{SVG}g")}
        assert {"CHOOSE_SIZE", "ORDERED", "IDLE"} <= nodes
        assert "rule 1" in [t.text for t in svg.iter(f"{SVG}text")]
        turns = ET.fromstring((await client.get("/console/api/config/turn-graph.svg")).text)
        drawn = {g.get("data-node") for g in turns.iter(f"{SVG}g")}
        assert {"load_or_create_conversation", "schema_extraction", "persist_conversation"} <= drawn
        assert len(list(turns.iter(f"{SVG}path"))) > len(drawn)  # edges, besides the arrow marker


async def test_docs_and_console_are_served_from_the_package(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        for docs_page in ("/docs",):
            docs = await client.get(docs_page)
            assert docs.status_code == 200
            assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
            assert assets and all(a.startswith("/docs/assets/") for a in assets), assets
            for asset in assets:
                assert (await client.get(asset)).status_code == 200, asset
        page = await client.get("/console")
        assert page.status_code == 200 and "Content-Security-Policy" in page.headers
        for asset in re.findall(r'(?:src|href)="(/[^"]*)"', page.text):
            assert asset.startswith("/console/static/") or asset == "/docs", asset
            assert (await client.get(asset)).status_code == 200
        assert "https://" not in (await client.get("/console/static/console.js")).text


async def test_graphs_fall_back_to_the_built_in_layout_without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    from convengine.console import graphs

    edges = [graphs.Edge("IDLE", "ASKED", "ORDER"), graphs.Edge("ASKED", "DONE", 'say "done" \\ now')]
    if graphs.shutil.which("dot"):
        drawn = ET.fromstring(graphs.render_svg(["IDLE"], edges, title="states"))
        assert drawn.get("data-layout") == "dot"
        assert {g.get("data-node") for g in drawn.iter(f"{SVG}g")} >= {"IDLE", "ASKED", "DONE"}
        assert 'say "done" \\ now' in [t.text for t in drawn.iter(f"{SVG}text")]  # quoted safely for dot
    monkeypatch.setattr(graphs.shutil, "which", lambda name: None)
    fallback = ET.fromstring(graphs.render_svg(["IDLE"], edges, title="states"))
    assert fallback.get("data-layout") is None
    assert {g.get("data-node") for g in fallback.iter(f"{SVG}g")} == {"IDLE", "ASKED", "DONE"}
