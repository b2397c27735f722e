"""``convengine serve`` prints where its console, docs and API are; ``--reload`` re-imports an edited pack."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from convengine import Engine
from convengine.api.pack_watch import PackWatcher
from convengine.cli.app import app
from tests.conftest import EXAMPLES
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = EXAMPLES / "support_desk.yaml"
GREETING = "Hello! I can cancel an order or tell you where one is. What do you need?"


def test_serve_prints_its_addresses_once_it_listens(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "convengine.cli", "serve", "--url",
                                f"sqlite:///{tmp_path / 's.db'}", "--pack", str(SUPPORT), "--port", str(port),
                                "--llm", "none", "--log-level", "warning"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert process.stdout is not None
    try:
        lines = [process.stdout.readline() for _ in range(3)]
        base = f"http://127.0.0.1:{port}"
        assert [line.split()[-1] for line in lines] == [f"{base}/console", f"{base}/docs",
                                                        f"{base}/api/v1/conversation/message"], lines
        for line in lines:  # each address answers
            address = line.split()[-1]
            if address.endswith("/message"):
                assert httpx.post(address, json={"message": "hello"}, timeout=30).json()["payload"]["value"] == \
                    GREETING
            else:
                assert httpx.get(address, timeout=30).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


async def wait_for(engine: Engine, text: str, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while True:
        reply = (await engine.aprocess("hello")).text
        if reply == text or time.monotonic() > deadline:
            return reply
        await asyncio.sleep(0.2)


async def test_reload_reimports_the_edited_pack_and_keeps_serving_a_bad_edit_out(db_url: str,
                                                                                  tmp_path: Path) -> None:
    pack = tmp_path / "desk.yaml"
    pack.write_text(SUPPORT.read_text())
    told: list[str] = []
    engine = await Engine.aopen(db_url, pack=pack, tasks={"orderTasks": object()})
    watching = asyncio.create_task(PackWatcher(engine, pack, report=told.append).run())
    try:
        assert (await engine.aprocess("hello")).text == GREETING
        pack.write_text(SUPPORT.read_text().replace(GREETING, "Hi, edited."))
        assert await wait_for(engine, "Hi, edited.") == "Hi, edited."
        deadline = time.monotonic() + 30  # the watcher reports once its reload returns, maybe after a turn saw it
        while not told and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert told and told[-1].startswith(f"reloaded {pack} (configuration ")

        pack.write_text(SUPPORT.read_text().replace("'^\\s*(hi|hello", "'^\\s*((hi|hello"))  # a regex that cannot compile
        deadline = time.monotonic() + 30
        while not any("refused" in line for line in told) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert "still serving the previous configuration" in told[-1] and "\n" not in told[-1]
        assert (await engine.aprocess("hello")).text == "Hi, edited."
    finally:
        watching.cancel()
        await engine.aclose()


def test_reload_needs_a_pack_and_one_worker(tmp_path: Path) -> None:
    for extra, reason in ((["--reload"], "give it with --pack"),
                          (["--reload", "--pack", str(SUPPORT), "--workers", "2"], "works with one worker")):
        done = CliRunner().invoke(app, ["serve", "--url", f"sqlite:///{tmp_path / 'r.db'}", "--port", "1", *extra])
        assert done.exit_code == 2 and reason in done.output, done.output
    assert not (tmp_path / "r.db").exists()  # refused before anything was opened
