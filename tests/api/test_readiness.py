"""``GET /ready`` beside ``GET /health``: readiness follows the database, liveness does not.

PostgreSQL stopped and restarted under a server: tests/reliability/test_readiness_postgres.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convengine.api.readiness import Readiness
from convengine.db import parse_database_url, upgrade
from convengine.settings import ReadinessSettings
from tests.api.auth_support import auth_env
from tests.servers import Server

FAST = {"CONVENGINE_API__READINESS__TIMEOUT_S": "0.5", "CONVENGINE_API__READINESS__CACHE_S": "0.2"}
READY = {"status": "ready"}


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """A server with API keys on a SQLite file (readiness and liveness need no key)."""
    path = tmp_path / "ready.db"
    upgrade(parse_database_url(f"sqlite:///{path}"))
    server = Server(f"sqlite:///{path}", tmp_path / "server.log", env=auth_env(**FAST))
    yield server, path
    server.stop()


def wait_for(base: str, status: int, within: float = 10) -> httpx.Response:
    """``/ready`` until it answers ``status`` (it may answer from its cache for ``cache_s``)."""
    deadline = time.monotonic() + within
    while True:
        response = httpx.get(base + "/ready", timeout=10)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def assert_not_ready(response: httpx.Response, says: str, secret: str) -> None:
    assert response.status_code == 503, response.text
    assert response.json() == {"status": "unavailable", "errorCode": "DATABASE_UNAVAILABLE", "message": says}
    assert secret not in response.text  # neither the database's path nor the driver's error
    assert response.headers["cache-control"] == "no-store"


def test_sqlite_ready_follows_the_database_file_while_health_stays_ok(sqlite_server: tuple[Server, Path]) -> None:
    server, path = sqlite_server
    response = httpx.get(server.base + "/ready", timeout=10)  # no credentials needed, as /health
    assert (response.status_code, response.json()) == (200, READY)

    away = path.with_suffix(".away")
    os.rename(path, away)
    path.mkdir()  # the database file replaced by something SQLite cannot open (permissions do not stop root)
    try:
        assert_not_ready(wait_for(server.base, 503), "the database cannot be reached", str(path.parent))
        assert httpx.get(server.base + "/health", timeout=10).status_code == 200  # liveness: still alive
    finally:
        path.rmdir()
        os.rename(away, path)
    assert wait_for(server.base, 200).json() == READY


def test_the_schema_declares_ready_and_health_without_security(sqlite_server: tuple[Server, Path]) -> None:
    server, _ = sqlite_server
    paths = httpx.get(server.base + "/openapi.json", timeout=10).json()["paths"]
    assert set(paths["/ready"]["get"]["responses"]) >= {"200", "503"}
    assert paths["/ready"]["get"].get("security") == [] and paths["/health"]["get"].get("security") == []


class CountingProbe:
    def __init__(self, delay: float = 0.05, fail: bool = False) -> None:
        self.calls = 0
        self.delay = delay
        self.fail = fail

    async def __call__(self, timeout_s: float) -> None:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail:
            raise OSError("connection refused by db.internal:5432 for user secret")


async def test_concurrent_polls_share_one_probe_and_its_answer_is_reused_for_cache_s() -> None:
    clock = [100.0]
    probe = CountingProbe()
    readiness = Readiness(probe, ReadinessSettings(timeout_s=1, cache_s=1), clock=lambda: clock[0])
    states = await asyncio.gather(*(readiness.check() for _ in range(50)))
    assert probe.calls == 1 and all(s.ready for s in states)
    clock[0] += 0.9
    await readiness.check()
    assert probe.calls == 1
    clock[0] += 0.2
    await readiness.check()
    assert probe.calls == 2


async def test_a_probe_that_hangs_is_abandoned_at_the_timeout_and_a_failure_names_no_detail() -> None:
    hanging = Readiness(CountingProbe(delay=60), ReadinessSettings(timeout_s=0.2, cache_s=0))
    started = time.monotonic()
    state = await hanging.check()
    assert time.monotonic() - started < 2
    assert (state.ready, state.message) == (False, "the database did not answer within 0.2 s")

    refused = await Readiness(CountingProbe(fail=True), ReadinessSettings(cache_s=0)).check()
    assert (refused.ready, refused.message) == (False, "the database cannot be reached")
