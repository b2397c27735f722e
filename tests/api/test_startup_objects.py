"""A served app leaves the objects it holds once started out of Python's garbage collector
(``gc.freeze``), as ``convengine serve`` asks; an app embedded in a host's own process does not touch
the collector unless asked."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from convengine.api.app import create_app
from tests.helpers import pack
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
MESSAGE = "/api/v1/conversation/message"


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's collector as it was (a frozen object is never collected)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


async def converse(client: object) -> list[str]:
    intents = []
    cid = None
    for text in ("hello", "I need a loan", "hello"):
        body = {"message": text, **({"conversationId": cid} if cid else {})}
        reply = await client.post(MESSAGE, json=body)  # type: ignore[attr-defined]
        assert reply.status_code == 200, reply.text
        cid = reply.json()["conversationId"]
        intents.append(reply.json()["intent"])
    return intents


async def test_a_served_app_freezes_what_it_holds_once_started_and_serves_on(db_url: str, unfrozen: None) -> None:
    async with in_process(create_app(db_url, pack=pack(), replace=True, freeze_gc=True)) as client:
        frozen = gc.get_freeze_count()
        assert frozen > 50_000  # the modules, configuration and graph of the started server
        assert await converse(client) == ["GREETING", "LOAN", "GREETING"]
        assert gc.get_freeze_count() <= frozen  # what turns create stays the collector's (frozen objects dropped are freed)


async def test_an_embedded_app_leaves_the_collector_alone(db_url: str, unfrozen: None) -> None:
    async with in_process(create_app(db_url, pack=pack(), replace=True)) as client:
        assert await converse(client) == ["GREETING", "LOAN", "GREETING"]
        assert gc.get_freeze_count() == 0
