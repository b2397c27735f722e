"""TurnAudit, one turn's trail: what passes the filter is kept in order for the turn's batch write and
published live, stamped with the turn, the running step and (unless turned off) ``_meta``; verbose
messages are spoken only to listeners and never stored."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from convengine.audit import AuditBus, AuditFilter, TurnAudit
from convengine.audit.collector import verbose_event
from convengine.catalog import stages
from convengine.settings import AuditSettings

CID, TURN = "9d1c7f0e-0000-4000-8000-000000000001", "turn-1"


def collector(bus: AuditBus | None = None, *, persist_meta: bool = True, **audit: Any) -> TurnAudit:
    return TurnAudit(CID, audit_filter=AuditFilter(AuditSettings(**audit)), bus=bus, persist_meta=persist_meta,
                     turn_id=TURN)


class Resolver:
    """Records what it was asked and answers with a message for one stage (or raises)."""

    def __init__(self, speaks_for: str = stages.USER_INPUT, fail: bool = False) -> None:
        self.asked: list[tuple[str, tuple[str, ...], str | None]] = []
        self.speaks_for, self.fail = speaks_for, fail

    def resolve(self, stage: str, stage_payload: Mapping[str, Any], *, conversation_id: str, intent: str | None,
                state: str | None, step_names: Sequence[str], turn: Any = None) -> dict[str, Any] | None:
        self.asked.append((stage, tuple(step_names), intent))
        if self.fail:
            raise ValueError("resolver broke")
        return {"text": f"doing {stage}"} if stage == self.speaks_for else None


def test_events_are_kept_in_order_with_their_turn_step_and_meta() -> None:
    audit = collector()
    before = datetime.now(UTC)
    audit.emit(stages.STEP_ENTER, {"step": "rules"})
    audit.enter_step("rules", "RulesStep")
    audit.emit(stages.USER_INPUT, {"text": "hi"}, intent="GREETING", state="IDLE")
    audit.leave_step()
    audit.emit(stages.ASSISTANT_OUTPUT)
    assert [(e.stage, e.step, e.turn_id) for e in audit.events] == [
        (stages.STEP_ENTER, None, TURN), (stages.USER_INPUT, "rules", TURN), (stages.ASSISTANT_OUTPUT, None, TURN)]
    middle = audit.events[1]
    assert middle.payload == {"text": "hi"} and before <= middle.created_at <= datetime.now(UTC)
    assert middle.meta == {"stage": stages.USER_INPUT, "conversationId": CID, "emittedAt": middle.created_at.isoformat(),
                           "intent": "GREETING", "state": "IDLE", "step": "rules", "turnId": TURN}
    assert audit.events[2].payload == {}


def test_the_payload_is_copied_so_later_changes_do_not_rewrite_the_trail() -> None:
    audit = collector()
    payload = {"text": "hi"}
    audit.emit(stages.USER_INPUT, payload)
    payload["text"] = "changed"
    assert audit.events[0].payload == {"text": "hi"}


def test_without_persist_meta_events_have_no_meta_but_keep_their_turn() -> None:
    audit = collector(persist_meta=False)
    audit.emit(stages.USER_INPUT, {"text": "hi"})
    assert audit.events[0].meta is None and audit.events[0].turn_id == TURN
    assert audit.events[0].stored_payload() == {"text": "hi"}


@pytest.mark.asyncio
async def test_kept_events_are_published_live_and_filtered_ones_neither_kept_nor_published() -> None:
    bus = AuditBus()
    sub = bus.subscribe(CID)
    audit = collector(bus, level="STANDARD")
    audit.emit(stages.STEP_ENTER, {"step": "rules"})
    audit.emit(stages.USER_INPUT, {"text": "hi"})
    assert [e.stage for e in audit.events] == [stages.USER_INPUT]
    assert sub.queue.qsize() == 1 and sub.queue.get_nowait() is audit.events[0]


@pytest.mark.asyncio
async def test_verbose_messages_are_spoken_inside_a_step_to_listeners_only_and_never_kept() -> None:
    bus = AuditBus()
    audit = collector(bus, level="NONE")  # verbose messages do not depend on the audit filter
    resolver = Resolver()
    audit.verbose = resolver
    audit.emit(stages.USER_INPUT, {"text": "no step yet"})
    audit.enter_step("rules", "RulesStep")
    audit.emit(stages.USER_INPUT, {"text": "nobody listens"})
    assert resolver.asked == []  # outside a step, or with no one listening, nothing is resolved
    sub = bus.subscribe(CID)
    audit.emit(stages.USER_INPUT, {"text": "hi"}, intent="GREETING")
    audit.emit(stages.ASSISTANT_OUTPUT, {"text": "no row for this one"})
    assert resolver.asked == [(stages.USER_INPUT, ("RulesStep", "rules"), "GREETING"),
                              (stages.ASSISTANT_OUTPUT, ("RulesStep", "rules"), None)]
    spoken = sub.queue.get_nowait()
    assert sub.queue.empty()
    assert (spoken.stage, spoken.step, spoken.payload) == (stages.VERBOSE, "rules", {"verbose": {"text": "doing USER_INPUT"}})
    assert audit.events == []


@pytest.mark.asyncio
async def test_a_step_whose_class_is_its_name_is_matched_once() -> None:
    bus = AuditBus()
    audit = collector(bus)
    audit.verbose = resolver = Resolver()
    bus.subscribe(CID)
    audit.enter_step("custom", "custom")
    audit.emit(stages.USER_INPUT)
    assert resolver.asked[0][1] == ("custom",)


@pytest.mark.asyncio
async def test_a_failing_resolver_never_breaks_the_audit(caplog: pytest.LogCaptureFixture) -> None:
    bus = AuditBus()
    sub = bus.subscribe(CID)
    audit = collector(bus)
    audit.verbose = Resolver(fail=True)
    audit.enter_step("rules")
    audit.emit(stages.USER_INPUT, {"text": "hi"})
    assert [e.stage for e in audit.events] == [stages.USER_INPUT]
    assert [e.stage for e in [sub.queue.get_nowait()]] == [stages.USER_INPUT] and sub.queue.empty()
    assert "no verbose message for USER_INPUT" in caplog.text


def test_a_verbose_event_is_live_only_and_carries_its_body() -> None:
    body = {"text": "Checking your order"}
    made = verbose_event(CID, "rules", body)
    assert (made.stage, made.step, made.payload, made.meta, made.turn_id) == (stages.VERBOSE, "rules",
                                                                              {"verbose": body}, None, None)


def test_timings_and_total_time_are_measured() -> None:
    audit = collector()
    audit.record_timing("rules", 1.5)
    audit.record_timing("memory", 0.25)
    assert audit.timings == [("rules", 1.5), ("memory", 0.25)]
    first = audit.total_ms()
    asyncio.run(asyncio.sleep(0.01))
    assert audit.total_ms() >= first + 9


@pytest.mark.parametrize("persist_meta", [True, False])
def test_an_event_made_outside_the_trail_is_stamped_as_the_turns_own(persist_meta: bool) -> None:
    from convengine.audit import AuditEvent

    audit = collector(persist_meta=persist_meta)
    failure = AuditEvent(CID, "ENGINE_KNOWN_FAILURE", {"errorCode": "X", "step": "rules"})
    stamped = audit.stamped(failure)
    assert stamped.turn_id == TURN and stamped.payload == failure.payload and stamped.created_at == failure.created_at
    if persist_meta:  # stored with _meta.turnId, so reading the trail back finds the turn
        assert stamped.meta is not None and (stamped.meta["turnId"], stamped.meta["step"]) == (TURN, "rules")
        assert stamped.row_payload()["_meta"] == {"turnId": TURN}  # the rest is implied by the row
    else:
        assert stamped.meta is None


@pytest.mark.parametrize("persist_meta", [True, False])
def test_a_trail_packs_what_reading_it_builds(monkeypatch: pytest.MonkeyPatch, persist_meta: bool) -> None:
    """The turn's row is packed from the recorded events without building them; unpacking it gives the
    very events (stages, payloads, times, steps, ``_meta``) reading the trail builds, over several rows."""
    from convengine.audit import packing
    from convengine.checkpointing.persistence import _dumps

    monkeypatch.setattr(packing, "EVENTS_PER_ROW", 3)
    audit = collector(persist_meta=persist_meta)
    audit.emit(stages.USER_INPUT, {"text": "hi"})
    audit.enter_step("intent_resolution", "IntentResolutionStep")
    audit.emit(stages.INTENT_UPDATED, {"intent": "ORDER", "nested": {"a": [1, 2]}}, intent="ORDER", state="IDLE")
    audit.emit(stages.STEP_EXIT, None, intent="ORDER")
    audit.leave_step()
    audit.emit(stages.ASSISTANT_OUTPUT, {"text": "done"}, state="DONE")
    rows = audit.events.pack_rows(_dumps)
    assert len(rows) == 2  # 4 events, 3 per row
    unpacked = [e for index, (at, value) in enumerate(rows) for e in packing.unpack(index, CID, at, value)]
    built = list(audit.events)
    assert [(e.stage, e.payload, e.created_at, e.meta) for e in unpacked] == [
        (e.stage, e.payload, e.created_at, e.meta) for e in built]
    # step and turn are stored in _meta: without it, neither way of packing keeps them
    assert [(e.step, e.turn_id) for e in unpacked] == ([(e.step, e.turn_id) for e in built] if persist_meta
                                                       else [(None, None)] * 4)
    assert [packing.pack(chunk, _dumps)[1] for chunk in packing.chunks(built)] == [value for _, value in rows]


def test_masking_a_trail_replaces_what_it_packs() -> None:
    from convengine.audit import packing
    from convengine.checkpointing.persistence import _dumps

    audit = collector()
    audit.emit(stages.USER_INPUT, {"text": "my pin is 1234"})
    audit.events.replace([e.__class__(e.conversation_id, e.stage, {"text": "my pin is ****"}, e.created_at, e.step,
                                      e.meta, turn_id=e.turn_id) for e in audit.events])
    (at, value), = audit.events.pack_rows(_dumps)
    assert [e.payload for e in packing.unpack(1, CID, at, value)] == [{"text": "my pin is ****"}]
    assert audit.events.entries() == [(stages.USER_INPUT, None, {"text": "my pin is ****"})]
