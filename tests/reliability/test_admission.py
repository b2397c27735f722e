"""Turns under load: no turn waits for a second connection of the pool it holds one of, turns past
the admission limit wait in a bounded queue, and past the queue a turn is refused at once (503,
``Retry-After``, ``SERVER_BUSY``) with nothing of it recorded.

Before admission and the turn's own connection, 40 concurrent new conversations on SQLite's pool of
15 connections each held one connection and waited for a second (the adoption check of a new
conversation), and every turn failed after the pool's 30 s timeout.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convengine.api import create_app
from convengine.catalog.errors import ConversationNotFoundError, ServerBusyError
from tests.conftest import PACKS
from tests.helpers import engine_on, pack
from tests.servers import Server, in_process

pytestmark = pytest.mark.asyncio

CONVERSATIONS = 40
MESSAGES = ("hello", "a loan please")
# One connection for every turn, and more turns admitted than connections: a turn that asked the pool
# for a second connection while holding the only one would fail after timeout_s.
ONE_CONNECTION = {"pool": {"size": 1, "max_overflow": 0, "timeout_s": 5}, "admission": {"max_turns": 8}}
ONE_CONNECTION_ENV = {"CONVENGINE_POOL__SIZE": "1", "CONVENGINE_POOL__MAX_OVERFLOW": "0",
                      "CONVENGINE_POOL__TIMEOUT_S": "5", "CONVENGINE_ADMISSION__MAX_TURNS": "8"}
DEADLINE_S = 60


async def _recorded(db_url: str, cids: list[str]) -> dict[str, list[str]]:
    """Each conversation's stored user inputs, in order."""
    async with engine_on(db_url, None) as engine:
        return {cid: [row["user_input"] for row in await engine.ahistory(cid)] for cid in cids}


async def test_forty_conversations_on_one_connection_all_finish_and_are_recorded_in_order(db_url: str) -> None:
    cids = [str(uuid.uuid4()) for _ in range(CONVERSATIONS)]
    async with engine_on(db_url, pack(), **ONE_CONNECTION) as engine:

        async def talk(cid: str) -> list[int]:
            return [(await engine.aprocess(message, cid)).turn for message in MESSAGES]

        started = time.monotonic()
        turns = await asyncio.wait_for(asyncio.gather(*(talk(cid) for cid in cids)), DEADLINE_S)
        elapsed = time.monotonic() - started
    assert turns == [[1, 2]] * CONVERSATIONS
    assert elapsed < DEADLINE_S
    assert await _recorded(db_url, cids) == {cid: list(MESSAGES) for cid in cids}


@pytest.fixture
def one_connection_server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(db_url, tmp_path / "server.log", env=ONE_CONNECTION_ENV)
    yield running
    running.stop()


async def test_forty_conversations_over_http_on_one_connection_are_all_answered_and_recorded(
        one_connection_server: Server, db_url: str) -> None:
    cids = [str(uuid.uuid4()) for _ in range(CONVERSATIONS)]
    limits = httpx.Limits(max_connections=CONVERSATIONS)
    async with httpx.AsyncClient(base_url=one_connection_server.base, timeout=DEADLINE_S, limits=limits) as client:

        async def talk(cid: str) -> list[dict[str, Any]]:
            replies = []
            for message in MESSAGES:
                response = await client.post("/api/v1/conversation/message",
                                             json={"message": message, "conversationId": cid})
                assert response.status_code == 200, response.text
                replies.append(response.json())
            return replies

        conversations = await asyncio.gather(*(talk(cid) for cid in cids))
    assert all(reply["success"] for replies in conversations for reply in replies), conversations
    assert await _recorded(db_url, cids) == {cid: list(MESSAGES) for cid in cids}


class Held:
    """A task that holds its turn until the test lets it go."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def wait(self, _task: Any) -> None:
        self.started.set()
        await self.release.wait()


async def _until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_past_the_queue_a_turn_is_refused_at_once_with_503_and_retry_after(db_url: str) -> None:
    held = Held()
    app = create_app(db_url, pack=PACKS / "api_pack.yaml", tasks={"slow": {"wait": held.wait}},
                     admission={"max_turns": 1, "queue_length": 1, "retry_after_s": 7})
    running, queued, refused_cid = (str(uuid.uuid4()) for _ in range(3))
    async with in_process(app) as client:
        gate = app.state.engine.runtime.gate

        def send(message: str, cid: str) -> Any:
            return client.post("/api/v1/conversation/message", json={"message": message, "conversationId": cid})

        first = asyncio.create_task(send("a loan slowly", running))
        await asyncio.wait_for(held.started.wait(), 10)
        second = asyncio.create_task(send("hello", queued))
        await _until(lambda: gate.waiting == 1)
        started = time.monotonic()
        refused = await send("hello", refused_cid)
        refused_in = time.monotonic() - started
        held.release.set()
        answered = [await first, await second]
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "7"
    assert refused.json()["errorCode"] == "SERVER_BUSY"
    assert refused_in < 2  # at once, not after a pool or queue timeout
    assert [r.status_code for r in answered] == [200, 200]
    assert all(r.json()["success"] for r in answered)
    assert await _recorded(db_url, [running, queued]) == {running: ["a loan slowly"], queued: ["hello"]}
    async with engine_on(db_url, None) as engine:
        with pytest.raises(ConversationNotFoundError):  # nothing of the refused turn was written
            await engine.aaudit(refused_cid)


async def test_a_turn_that_waits_past_the_queue_timeout_is_refused_unrun(db_url: str) -> None:
    held = Held()
    options = {"tasks": {"slow": {"wait": held.wait}},
               "admission": {"max_turns": 1, "queue_length": 5, "queue_timeout_s": 0.3}}
    async with engine_on(db_url, PACKS / "api_pack.yaml", **options) as engine:
        first = asyncio.create_task(engine.aprocess("a loan slowly", str(uuid.uuid4())))
        await asyncio.wait_for(held.started.wait(), 10)
        late = str(uuid.uuid4())
        with pytest.raises(ServerBusyError) as refused:
            await engine.aprocess("hello", late)
        held.release.set()
        assert (await first).turn == 1
        assert refused.value.recoverable and refused.value.retry_after_s == 2
        with pytest.raises(ConversationNotFoundError):
            await engine.aaudit(late)


async def test_a_pool_timeout_reaches_the_caller_without_the_librarys_text(db_url: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    held = Held()
    app = create_app(db_url, pack=PACKS / "api_pack.yaml", tasks={"slow": {"wait": held.wait}},
                     pool={"size": 1, "max_overflow": 0, "timeout_s": 0.3}, admission={"max_turns": 2})
    async with in_process(app) as client:
        first = asyncio.create_task(client.post("/api/v1/conversation/message",
                                                json={"message": "a loan slowly", "conversationId": str(uuid.uuid4())}))
        await asyncio.wait_for(held.started.wait(), 10)  # its turn holds the only connection
        failed = await client.post("/api/v1/conversation/message", json={"message": "hello"})
        held.release.set()
        assert (await first).json()["success"]
    body = failed.json()
    assert failed.status_code == 200 and body["errorCode"] == "DATABASE_UNAVAILABLE" and body["recoverable"]
    for internal in ("QueuePool", "timed out", "sqlalche.me", "SELECT"):
        assert internal not in failed.text
    assert "QueuePool limit of size 1" in caplog.text  # the server log keeps what happened


async def test_a_call_log_row_the_database_refuses_does_not_break_the_turn(db_url: str) -> None:
    """The call log is written in the turn's commit: a row the database refuses (PostgreSQL: a
    temperature past the column's NUMERIC(3,2)) is left out and the turn commits, as when the log had
    its own transaction."""
    from convengine.llm import ScriptedLLM

    llm = ScriptedLLM(default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    settings = {"flow": {"dialogue_act": {"resolute": "LLM_ONLY"}}, "llm": {"log_calls": True, "temperature": 12.5}}
    async with engine_on(db_url, pack(settings=settings), llm=llm) as engine:
        cid = str(uuid.uuid4())
        assert (await engine.aprocess("hello", cid)).turn == 1
        assert (await engine.aprocess("hello again", cid)).turn == 2
        assert [row["user_input"] for row in await engine.ahistory(cid)] == ["hello", "hello again"]
    assert llm.calls, "the turns called the model"
