"""A recorded conversation exported as a .conv.yaml test replays it: it passes `convengine test`
while the pack behaves as recorded and fails once the pack changes what was recorded."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from convengine.testing import run_file
from tests.cli.test_front_door import DOWN
from tests.console.support import PACK, console_app
from tests.servers import in_process, post


async def _record(client: httpx.AsyncClient) -> str:
    cid = (await post(client, "I'd like a pizza"))["conversationId"]
    await post(client, "when do you close?", cid)
    await post(client, "medium", cid)
    return cid


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def convengine_test(path: Path) -> subprocess.CompletedProcess[str]:
    return cli("test", str(path))


async def test_export_passes_and_fails_when_the_pack_changes(db_url: str, tmp_path: Path) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = await _record(client)
        response = await client.get(f"/console/api/conversations/{cid}/export")
    assert response.status_code == 200
    assert response.headers["content-disposition"] == f'attachment; filename="conversation-{cid[:8]}.conv.yaml"'
    document = yaml.safe_load(response.text)
    assert document["pack"] == str(PACK)  # the pack the server was started with
    [test] = document["tests"]
    assert test["llm"] == {"SCHEMA_EXTRACTION": [{"size": None}, {"size": None}, {"size": "medium"}]}
    assert [t["user"] for t in test["turns"]] == ["I'd like a pizza", "when do you close?", "medium"]
    assert test["turns"][2]["expect"]["payload"]["equals"] == "One medium pizza, coming up!"
    exported = tmp_path / "replay.conv.yaml"
    exported.write_text(response.text, encoding="utf-8")
    passed = convengine_test(exported)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed, 0 failed" in passed.stdout

    changed = tmp_path / "pizza.yaml"
    changed.write_text(PACK.read_text(encoding="utf-8").replace("pizza, coming up!", "pizza, on its way!"),
                       encoding="utf-8")
    assert changed.read_text(encoding="utf-8") != PACK.read_text(encoding="utf-8")
    retargeted = tmp_path / "changed.conv.yaml"
    retargeted.write_text(response.text.replace(f"pack: {PACK}", "pack: pizza.yaml"), encoding="utf-8")
    failed = convengine_test(retargeted)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "turn 3 ('medium')" in failed.stdout and "on its way!" in failed.stdout


async def test_undone_turns_are_left_out_and_upto_cuts_the_replay(db_url: str, tmp_path: Path) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = await _record(client)
        assert (await client.post(f"/api/v1/conversation/{cid}/undo")).status_code == 200
        await post(client, "large", cid)
        full = yaml.safe_load((await client.get(f"/console/api/conversations/{cid}/export")).text)
        first = yaml.safe_load((await client.get(f"/console/api/conversations/{cid}/export",
                                                 params={"upto": 1})).text)
    turns = full["tests"][0]["turns"]
    assert [t["user"] for t in turns] == ["I'd like a pizza", "when do you close?", "large"]
    assert turns[2]["expect"]["state"] == "ORDERED"
    assert full["tests"][0]["llm"]["SCHEMA_EXTRACTION"] == [{"size": None}, {"size": None}, {"size": "large"}]
    assert [t["user"] for t in first["tests"][0]["turns"]] == ["I'd like a pizza"]
    path = tmp_path / "replay.conv.yaml"
    path.write_text(yaml.safe_dump(full), encoding="utf-8")
    [outcome] = run_file(path)
    assert outcome.passed, outcome.report()


async def test_a_failed_turn_is_listed_with_its_error_and_left_out_of_the_export(db_url: str, tmp_path: Path) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        failed = await post(client, "explode please", cid)
        assert failed["success"] is False and failed["errorCode"] == "LLM_CALL_FAILED"
        await post(client, "small", cid)
        listed = (await client.get(f"/console/api/conversations/{cid}/turns")).json()["turns"]
        view = (await client.get(f"/console/api/conversations/{cid}/turns/2")).json()
        exported = (await client.get(f"/console/api/conversations/{cid}/export")).text
    assert [(t["user"], t["after"] and t["after"]["state"]) for t in listed] == [
        ("I'd like a pizza", "CHOOSE_SIZE"), ("explode please", None), ("small", "ORDERED")]
    assert "the model is down" in listed[1]["error"]
    assert [(c["callSite"], c["ok"]) for c in view["llmCalls"]] == [("SCHEMA_EXTRACTION", False)]
    assert all(c["logged"] and c["reply"] is None for c in view["llmCalls"])
    test = yaml.safe_load(exported)["tests"][0]
    assert [t["user"] for t in test["turns"]] == ["I'd like a pizza", "small"]
    assert test["llm"] == {"SCHEMA_EXTRACTION": [{"size": None}, {"size": "small"}]}
    path = tmp_path / "replay.conv.yaml"
    path.write_text(exported, encoding="utf-8")
    [outcome] = run_file(path)
    assert outcome.passed, outcome.report()


async def test_export_needs_the_llm_calls_logged(db_url: str) -> None:
    async with in_process(console_app(db_url, llm={"log_calls": False})) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        response = await client.get(f"/console/api/conversations/{cid}/export")
    assert response.status_code == 422
    assert "llm.log_calls" in response.json()["message"]


async def test_cli_export_test_writes_a_passing_test(db_url: str, tmp_path: Path) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = await _record(client)
    output = tmp_path / "tests" / "replay.conv.yaml"
    output.parent.mkdir()
    exported = await asyncio.to_thread(cli, "export-test", cid, "--url", db_url, "--pack", str(PACK), "-o", str(output))
    assert exported.returncode == 0, exported.stderr
    assert yaml.safe_load(output.read_text(encoding="utf-8"))["pack"] == str(PACK)
    assert convengine_test(output).returncode == 0
    unknown = await asyncio.to_thread(cli, "export-test", "not-a-uuid", "--url", db_url, "--pack", str(PACK),
                                      "-o", str(output))
    assert unknown.returncode == 2 and "INVALID_CONVERSATION_ID" in unknown.stderr + unknown.stdout


def test_cli_export_test_with_the_database_down_is_one_line(tmp_path: Path) -> None:
    output = tmp_path / "replay.conv.yaml"
    done = cli("export-test", "6f1c2a52-0d3e-4c39-9a55-3f4e0b8d2a71", "--url", DOWN, "--pack", str(PACK), "-o",
               str(output))
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "error [DATABASE_UNAVAILABLE]" in lines[0] and not output.exists()
