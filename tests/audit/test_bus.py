"""The live audit bus: each subscriber gets the events of the conversations it asked for, on its own
event loop, from any thread; a slow subscriber loses its oldest events rather than slowing a turn; and
an engine's subscriber sees a turn's events live, in the order they are stored."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from convengine.audit import AuditBus, AuditEvent
from convengine.catalog import stages
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio


def event(cid: str, stage: str = stages.USER_INPUT, **payload: Any) -> AuditEvent:
    return AuditEvent(cid, stage, dict(payload))


def drain(queue: asyncio.Queue[AuditEvent]) -> list[AuditEvent]:
    found = []
    while not queue.empty():
        found.append(queue.get_nowait())
    return found


async def test_a_subscriber_gets_its_conversation_and_a_catch_all_gets_every_one() -> None:
    bus = AuditBus()
    mine, everything = bus.subscribe("a"), bus.subscribe()
    for cid, n in (("a", 1), ("b", 2), ("a", 3)):
        bus.publish(event(cid, n=n))
    assert [e.payload["n"] for e in drain(mine.queue)] == [1, 3]
    assert [(e.conversation_id, e.payload["n"]) for e in drain(everything.queue)] == [("a", 1), ("b", 2), ("a", 3)]


async def test_unsubscribing_stops_delivery_and_is_idempotent() -> None:
    bus = AuditBus()
    sub = bus.subscribe("a")
    bus.unsubscribe(sub)
    bus.unsubscribe(sub)
    bus.publish(event("a"))
    assert sub.queue.empty()
    assert bus.subscriber_count() == 0 and bus.watched() == set()


async def test_a_full_queue_drops_its_oldest_event_not_the_newest() -> None:
    bus = AuditBus()
    slow = bus.subscribe("a", maxsize=3)
    for n in range(5):
        bus.publish(event("a", n=n))
    assert [e.payload["n"] for e in drain(slow.queue)] == [2, 3, 4]


async def test_events_published_from_another_thread_arrive_on_the_subscribers_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = AuditBus()
    sub = bus.subscribe("a")
    seen_on: list[Any] = []
    original = sub._put

    def recording_put(e: AuditEvent) -> None:
        seen_on.append(threading.current_thread())
        original(e)

    monkeypatch.setattr(sub, "_put", recording_put)

    def publish_three() -> None:
        for n in range(3):
            bus.publish(event("a", n=n))

    worker = threading.Thread(target=publish_three)
    worker.start()
    worker.join()
    received = [await asyncio.wait_for(sub.queue.get(), 5) for _ in range(3)]
    assert [e.payload["n"] for e in received] == [0, 1, 2]
    assert seen_on == [threading.current_thread()] * 3  # put on the loop's thread, never the publisher's


async def test_a_subscriber_whose_loop_closed_is_skipped_quietly() -> None:
    bus = AuditBus()
    gone = await asyncio.to_thread(asyncio.run, _subscribe_on(bus))  # that loop is closed on return
    assert gone.loop.is_closed()
    alive = bus.subscribe("a")
    bus.publish(event("a"))  # must not raise for the subscriber of the closed loop
    assert len(drain(alive.queue)) == 1 and gone.queue.empty()


async def _subscribe_on(bus: AuditBus) -> Any:
    return bus.subscribe("a")


async def test_forwarders_get_the_events_they_want_unless_publishing_says_not_to() -> None:
    bus = AuditBus()
    every: list[str] = []
    wanted: list[str] = []
    bus.add_forwarder(lambda e: every.append(e.conversation_id))
    bus.add_forwarder(lambda e: wanted.append(e.conversation_id), wants=lambda cid: cid == "b")
    for cid in ("a", "b"):
        bus.publish(event(cid))
    bus.publish(event("b"), forward=False)  # e.g. an event that came from another process
    assert every == ["a", "b"] and wanted == ["b"]


async def test_has_subscribers_answers_for_local_subscribers_and_forwarders() -> None:
    bus = AuditBus()
    assert not bus.has_subscribers("a") and not bus.has_subscribers()
    sub = bus.subscribe("a")
    assert bus.has_subscribers("a") and bus.has_subscribers() and not bus.has_subscribers("b")
    bus.unsubscribe(sub)
    bus.add_forwarder(lambda e: None, wants=lambda cid: cid == "b")
    assert bus.has_subscribers("b") and not bus.has_subscribers("a")
    catch_all = bus.subscribe()
    assert bus.has_subscribers("a")
    assert bus.watched() == {None}
    bus.unsubscribe(catch_all)


async def test_watchers_hear_of_each_subscription_change() -> None:
    bus = AuditBus()
    heard: list[set[str | None]] = []
    bus.on_subscriptions_changed(lambda: heard.append(bus.watched()))
    a = bus.subscribe("a")
    everything = bus.subscribe()
    bus.unsubscribe(a)
    bus.unsubscribe(a)  # not subscribed any more: no change to announce
    bus.unsubscribe(everything)
    assert heard == [{"a"}, {"a", None}, {None}, set()]


# --- an engine's bus ----------------------------------------------------------------------------


async def test_an_engine_streams_a_turns_events_live_in_their_stored_order(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid, other = str(uuid.uuid4()), str(uuid.uuid4())
        mine = engine.subscribe(cid)
        await engine.aprocess("hello", cid)
        await engine.aprocess("hello", other)
        await engine.aprocess("a loan please", cid)
        live = drain(mine.queue)
        stored = await engine.aaudit(cid)
        assert {e.conversation_id for e in live} == {cid}
        assert [(e.stage, e.payload, e.turn_id) for e in live] == [(e.stage, e.payload, e.turn_id) for e in stored]
        engine.bus.unsubscribe(mine)


async def test_a_failed_turns_failure_is_streamed_too(db_url: str) -> None:
    from convengine.catalog.errors import ConvEngineError
    from convengine.nodes.common import Step

    def explode(turn: Any) -> None:
        raise RuntimeError("broken step")

    async with engine_on(db_url, pack(), steps=[Step("boom", explode, after="rules")]) as engine:
        cid = str(uuid.uuid4())
        sub = engine.subscribe(cid)
        with pytest.raises(ConvEngineError):
            await engine.aprocess("hello", cid)
        streamed = drain(sub.queue)
        verbose = [e for e in streamed if e.stage == stages.VERBOSE]  # live only: ConvEngine's fallback text
        assert [v.payload["verbose"]["text"] for v in verbose] == ["Something went wrong while processing boom."]
        live = [e for e in streamed if e.stage != stages.VERBOSE]
        assert [e.stage for e in live][-2:] == [stages.STEP_ERROR, "ENGINE_KNOWN_FAILURE"]
        assert [e.stage for e in live] == [e.stage for e in await engine.aaudit(cid)]
        failure = live[-1]
        assert failure.turn_id == live[0].turn_id is not None  # the failure belongs to the turn that failed
        assert failure.payload["errorCode"] == "PIPELINE_STEP_FAILED" and failure.payload["step"] == "boom"
