"""`convengine serve` in a subprocess, for tests that drive the HTTP API with a real client."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.conftest import PACKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def in_process(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` served by uvicorn on this event loop on 127.0.0.1, with a client for it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task.exception()
        await asyncio.sleep(0.05)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        await task


class Server:
    """A server process on a free port; ready when ``/health`` answers."""

    def __init__(self, url: str, log: Path, *extra: str, pack: Path | None = PACKS / "api_pack.yaml",
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = log.open("w")
        command = [sys.executable, "-m", "convengine.cli", "serve", "--url", url, "--port", str(self.port),
                   "--llm", "none", "--log-level", "warning", *(["--pack", str(pack)] if pack else []), *extra]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **(env or {})})
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"server did not start: {self.log_path.read_text()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, nothing flushed."""
        self.process.kill()
        self.process.wait(timeout=30)
        self.log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


async def read_events(response: httpx.Response, until: str, into: list[tuple[str, dict[str, Any], float]]) -> None:
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event:
            into.append((event, json.loads(line.split(":", 1)[1]), time.monotonic()))
            if event == until:
                return


async def post(client: httpx.AsyncClient, message: str, cid: str | None = None, **extra: Any) -> dict[str, Any]:
    body = {"message": message, **({"conversationId": cid} if cid else {}), **extra}
    response = await client.post("/api/v1/conversation/message", json=body)
    assert response.status_code == 200, response.text
    return response.json()
