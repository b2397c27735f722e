"""PostgreSQL restarted under a running engine: a clear recoverable error, then business as usual."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.nodes.common import Step
from tests.conftest import PG_URL, REQUIRE_PG
from tests.helpers import assert_linear, checkpoint_chain, engine_on, pack
from tests.servers import free_port

pytestmark = pytest.mark.asyncio
PG_SERVER = Path(__file__).parents[2] / "scripts" / "pg-server"


class DedicatedPostgres:
    """A PostgreSQL server of this test's own, so restarting it disturbs no other test."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="convengine-pg-restart.")
        self.port = free_port()
        self.url = self._run("start", self.folder, str(self.port)).strip()

    def _run(self, *args: str) -> str:
        return subprocess.run([str(PG_SERVER), *args], check=True, capture_output=True, text=True).stdout

    def stop(self) -> None:
        self._run("stop", self.folder)

    def start(self) -> None:
        self._run("start", self.folder, str(self.port))

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        subprocess.run([str(PG_SERVER), "stop", self.folder], check=False, capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[DedicatedPostgres]:
    """A PostgreSQL server of this test's own, stopped and started by it."""
    yield from dedicated_postgres()


def dedicated_postgres() -> Iterator[DedicatedPostgres]:
    if not PG_URL:  # the suite's PostgreSQL variable says PostgreSQL is available here
        if REQUIRE_PG:
            pytest.fail("CONVENGINE_REQUIRE_PG=1 but CONVENGINE_TEST_PG_URL is not set")
        pytest.skip("PostgreSQL not configured (set CONVENGINE_TEST_PG_URL)")
    server = DedicatedPostgres()
    yield server
    server.remove()


def restart_during(server: DedicatedPostgres, message: str) -> Step:
    """A step after the rules that restarts the server while a turn with this message is in flight."""
    async def restart(turn: Any) -> None:
        if turn.user_text == message:
            await asyncio.to_thread(server.restart)

    return Step("restart_postgres", restart, after="rules")


async def test_a_turn_in_flight_during_a_restart_fails_recoverably_and_later_turns_succeed(
        postgres: DedicatedPostgres) -> None:
    async with engine_on(postgres.url, pack(), steps=[restart_during(postgres, "loan again")]) as engine:
        cid = str(uuid.uuid4())
        assert (await engine.aprocess("loan please", cid)).turn == 1
        with pytest.raises(ConvEngineError) as failure:
            await engine.aprocess("loan again", cid)
        assert failure.value.code is ErrorCode.DATABASE_UNAVAILABLE and failure.value.recoverable
        assert "database is unavailable" in failure.value.message

        result = await engine.aprocess("hello", cid)  # the same engine, no restart
        assert (result.turn, result.intent, result.state) == (2, "GREETING", "IDLE")
        assert [h["user_input"] for h in await engine.ahistory(cid)] == ["loan please", "hello"]
        # the failed turn is in the audit trail, closed by its failure; nothing else of it was kept
        trail = [(e.stage, e.payload.get("text") or e.payload.get("errorCode")) for e in await engine.aaudit(cid)
                 if e.stage in ("USER_INPUT", "ENGINE_KNOWN_FAILURE", "ENGINE_UNKNOWN_FAILURE")]
        assert trail == [("USER_INPUT", "loan please"), ("USER_INPUT", "loan again"),
                         ("ENGINE_KNOWN_FAILURE", "DATABASE_UNAVAILABLE"), ("USER_INPUT", "hello")]
        assert_linear(await checkpoint_chain(engine, cid))


async def test_turns_while_the_server_is_down_fail_recoverably_until_it_is_back(postgres: DedicatedPostgres) -> None:
    async with engine_on(postgres.url, pack()) as engine:
        cid = str(uuid.uuid4())
        await engine.aprocess("loan please", cid)
        await asyncio.to_thread(postgres.stop)
        try:
            for message in ("hello", str(uuid.uuid4())):
                with pytest.raises(ConvEngineError) as failure:
                    await engine.aprocess(message, cid)
                assert failure.value.code is ErrorCode.DATABASE_UNAVAILABLE and failure.value.recoverable
        finally:
            await asyncio.to_thread(postgres.start)
        result = await engine.aprocess("hello", cid)
        assert (result.turn, result.intent) == (2, "GREETING")
        assert (await engine.astate(cid))["turn"] == 2
