"""What the audit records of a turn's input and effect: the caller's params (USER_INPUT
``inputParams``) and what the turn changed in the context (ENGINE_RETURN ``contextChanges``);
the turn view shows both and a params-driven conversation exported as a test replays them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from convengine import ScriptedLLM
from convengine.api.app import create_app
from convengine.config_loader.companions import pack_options
from convengine.testing import run_file
from tests.console.support import PACK, console_app, scripted_model
from tests.console.test_export import convengine_test
from tests.servers import in_process, post

pytestmark = pytest.mark.asyncio

ASK = "Which size would you like: small, medium or large?"
ORDERED = "One {{size}} pizza, coming up!"


def params_pack(folder: Path, *, ordered: str = "One {{size}} pizza for table {{inputParams.table}}, coming up!") -> Path:
    """The pizza pack whose replies depend on the caller's params (name and table)."""
    text = PACK.read_text(encoding="utf-8").replace(ASK, "Which size would you like, {{inputParams.name}}?")
    path = folder / "pizza_params.yaml"
    path.write_text(text.replace(ORDERED, ordered), encoding="utf-8")
    return path


async def audit(client: httpx.AsyncClient, cid: str, stage: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/v1/conversation/audit/{cid}")
    assert response.status_code == 200, response.text
    payloads = [json.loads(e["payloadJson"]) for e in response.json() if e["stage"] == stage]
    return [{k: v for k, v in p.items() if k != "_meta"} for p in payloads]


async def test_the_turn_view_shows_what_each_turn_changed_in_the_context(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        await post(client, "when do you close?", cid)
        await post(client, "large please", cid)
        await post(client, "restart", cid)
        views = [(await client.get(f"/console/api/conversations/{cid}/turns/{n}")).json() for n in (1, 2, 3, 4)]
        returned = await audit(client, cid, "ENGINE_RETURN")
    first, hours, large, restart = (v["contextChanges"] for v in views)
    assert first["added"]["intent_lock"] == {"locked": True, "reason": "SCHEMA_INCOMPLETE"}
    assert "I'd like a pizza" in first["added"]["memory"]["session_summary"]
    assert set(hours["changed"]) == {"memory"} and "added" not in hours  # the order is left alone
    assert large["added"] == {"size": "large"}
    assert "before" in large["changed"]["memory"] and "after" in large["changed"]["memory"]
    assert "size" in restart["removed"] and "added" not in restart  # the reset emptied the context
    # the view reads the audit: the ENGINE_RETURN events carry the same record, and only when something changed
    assert [r.get("contextChanges") for r in returned] == [first, hours, large, restart]


async def test_a_turn_that_changes_nothing_records_no_context_changes(db_url: str) -> None:
    async with in_process(console_app(db_url, flow={"memory": {"enabled": False}})) as client:
        cid = (await post(client, "when are you open?"))["conversationId"]
        await post(client, "when are you open?", cid)
        returned = await audit(client, cid, "ENGINE_RETURN")
        view = (await client.get(f"/console/api/conversations/{cid}/turns/2")).json()
    assert "contextChanges" not in returned[1] and view["contextChanges"] is None


async def test_large_values_and_params_are_bounded(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": {"size": "small"}})
    app = create_app(db_url, **pack_options(PACK, None), llm=llm, settings={"llm": {"log_calls": True}})
    params = {f"p{i}": i for i in range(10)} | {"big": "b" * 20_000}
    async with in_process(app) as client:
        reply = await post(client, "a small pizza " + "with extra cheese " * 40, inputParams={"table": 4})
        cid = reply["conversationId"]
        await post(client, "a small pizza", cid, inputParams=params)
        [returned, _] = await audit(client, cid, "ENGINE_RETURN")
        [first, second] = await audit(client, cid, "USER_INPUT")
        export = await client.get(f"/console/api/conversations/{cid}/export")
        upto = await client.get(f"/console/api/conversations/{cid}/export", params={"upto": 1})
    added = returned["contextChanges"]["added"]
    assert added["size"] == "small"  # small values are kept whole
    memory = json.dumps(json.loads(reply["context"])["memory"], ensure_ascii=False, separators=(",", ":"))
    assert len(memory) > 240 and added["memory"] == {"truncated": len(memory), "preview": memory[:80]}
    assert first["inputParams"] == {"table": 4}
    assert "inputParams" not in second
    assert second["inputParamsOmitted"]["keys"] == sorted(params) and second["inputParamsOmitted"]["bytes"] > 20_000
    # a turn whose params were not recorded cannot be replayed: the export says so instead of dropping them
    assert export.status_code == 422 and "turn 2's inputParams" in export.json()["message"]
    assert upto.status_code == 200 and yaml.safe_load(upto.text)["tests"][0]["turns"][0]["params"] == {"table": 4}


async def test_user_input_records_only_what_the_caller_sent(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza", inputParams={"name": "Ann", "schema_complete": True}))[
            "conversationId"]
        await post(client, "large please", cid)
        [first, second] = await audit(client, cid, "USER_INPUT")
        view = (await client.get(f"/console/api/conversations/{cid}/turns/1")).json()
    # the engine-computed key is dropped (and audited as rejected), persisted params are not re-recorded
    assert first == {**first, "text": "I'd like a pizza", "inputParams": {"name": "Ann"}}
    assert second["text"] == "large please" and "inputParams" not in second
    assert view["inputParams"] == {"name": "Ann"}


async def test_a_params_driven_conversation_round_trips_through_export(db_url: str, tmp_path: Path) -> None:
    pack = params_pack(tmp_path)
    app = create_app(db_url, **pack_options(pack, None), llm=scripted_model(), settings={"llm": {"log_calls": True}})
    async with in_process(app) as client:
        first = await post(client, "I'd like a pizza", inputParams={"name": "Ann", "table": 7})
        cid = first["conversationId"]
        second = await post(client, "large please", cid, inputParams={"table": 9})
        exported = (await client.get(f"/console/api/conversations/{cid}/export")).text
    assert first["payload"]["value"] == "Which size would you like, Ann?"
    assert second["payload"]["value"] == "One large pizza for table 9, coming up!"
    turns = yaml.safe_load(exported)["tests"][0]["turns"]
    assert [t.get("params") for t in turns] == [{"name": "Ann", "table": 7}, {"table": 9}]
    path = tmp_path / "replay.conv.yaml"
    path.write_text(exported, encoding="utf-8")
    passed = convengine_test(path)
    assert passed.returncode == 0 and "1 passed, 0 failed" in passed.stdout, passed.stdout + passed.stderr

    # without its params the replay gets other replies: the params are what drove the conversation
    document = yaml.safe_load(exported)
    for turn in document["tests"][0]["turns"]:
        turn.pop("params")
    stripped = tmp_path / "stripped.conv.yaml"
    stripped.write_text(yaml.safe_dump(document), encoding="utf-8")
    [outcome] = run_file(stripped)
    assert not outcome.passed and "'inputParams.name', which has no value" in outcome.report()

    # and a pack change to what the params drive fails the recorded test
    params_pack(tmp_path, ordered="One {{size}} pizza at table {{inputParams.table}}, coming up!")
    changed = convengine_test(path)
    assert changed.returncode == 1 and "at table 9" in changed.stdout, changed.stdout + changed.stderr
