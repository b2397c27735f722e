"""Admission of turns (:class:`TurnGate`): at most ``max_turns`` run at once, a bounded queue waits in
order, and past the queue or its timeout a turn is refused at once with SERVER_BUSY, saying which
setting refused it and when to retry. A slot is given back however its turn ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, ServerBusyError
from convengine.engine.admission import AdmissionLimits, TurnGate, default_max_turns
from convengine.settings import AdmissionSettings

pytestmark = pytest.mark.asyncio


@pytest.mark.parametrize(("pool", "turns"), [(100, 90), (15, 13), (10, 9), (11, 9), (2, 1), (1, 1)])
async def test_the_default_limit_keeps_a_tenth_of_the_pool_for_reads(pool: int, turns: int) -> None:
    assert default_max_turns(pool) == turns
    assert AdmissionLimits.of(AdmissionSettings(), pool).max_turns == turns


async def test_a_configured_limit_wins_over_the_pool_size() -> None:
    limits = AdmissionLimits.of(AdmissionSettings(max_turns=3, queue_length=7, queue_timeout_s=1.5,
                                                  retry_after_s=9), 100)
    assert limits == AdmissionLimits(3, 7, 1.5, 9)


def gate(max_turns: int = 1, queue_length: int = 1, queue_timeout_s: float = 5, retry_after_s: int = 4) -> TurnGate:
    return TurnGate(AdmissionLimits(max_turns, queue_length, queue_timeout_s, retry_after_s))


class Turn:
    """A turn holding its slot until released."""

    def __init__(self, turns: TurnGate, log: list[str], name: str) -> None:
        self.admitted = asyncio.Event()
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._run(turns, log, name))

    async def _run(self, turns: TurnGate, log: list[str], name: str) -> None:
        async with turns.admit():
            log.append(name)
            self.admitted.set()
            await self.release.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_turns_past_the_limit_wait_and_are_admitted_in_order_as_slots_free() -> None:
    turns, log = gate(max_turns=2, queue_length=3), list[str]()
    running = [Turn(turns, log, name) for name in ("a", "b", "c", "d")]
    await settle()
    assert log == ["a", "b"] and (turns.running, turns.waiting) == (2, 2)
    running[0].release.set()
    await asyncio.wait_for(running[2].admitted.wait(), 5)
    assert log == ["a", "b", "c"] and (turns.running, turns.waiting) == (2, 1)
    for turn in running:
        turn.release.set()
    await asyncio.gather(*(t.task for t in running))
    assert log == ["a", "b", "c", "d"] and (turns.running, turns.waiting) == (0, 0)


async def test_past_the_queue_a_turn_is_refused_at_once_naming_the_settings() -> None:
    turns, log = gate(max_turns=1, queue_length=1, retry_after_s=4), list[str]()
    first, queued = Turn(turns, log, "first"), Turn(turns, log, "queued")
    await settle()
    with pytest.raises(ServerBusyError) as refused:
        async with turns.admit():
            pytest.fail("admitted past the queue")
    error = refused.value
    assert error.code == ErrorCode.SERVER_BUSY and error.recoverable and error.retry_after_s == 4
    assert "admission.max_turns" in error.message and "admission.queue_length" in error.message
    assert "retry in 4s" in error.message
    assert (turns.running, turns.waiting) == (1, 1)  # the refusal took no place in the queue
    first.release.set()
    queued.release.set()
    await asyncio.gather(first.task, queued.task)
    assert log == ["first", "queued"]


async def test_with_no_queue_a_free_slot_still_admits() -> None:
    turns, log = gate(max_turns=1, queue_length=0), list[str]()
    first = Turn(turns, log, "first")
    await settle()
    with pytest.raises(ServerBusyError):
        async with turns.admit():
            pass
    first.release.set()
    await first.task
    async with turns.admit():
        assert turns.running == 1


async def test_a_turn_waiting_past_the_queue_timeout_is_refused_and_leaves_the_queue() -> None:
    turns, log = gate(max_turns=1, queue_length=5, queue_timeout_s=0.05), list[str]()
    first = Turn(turns, log, "first")
    await settle()
    with pytest.raises(ServerBusyError, match=r"within 0.05s \(settings admission.queue_timeout_s\)"):
        async with turns.admit():
            pass
    assert (turns.running, turns.waiting) == (1, 0)
    first.release.set()
    await first.task
    assert turns.running == 0


async def test_a_slot_is_given_back_when_its_turn_raises_or_is_cancelled() -> None:
    turns, log = gate(max_turns=1, queue_length=0), list[str]()
    with pytest.raises(RuntimeError):
        async with turns.admit():
            raise RuntimeError("turn failed")
    assert turns.running == 0
    stuck = Turn(turns, log, "stuck")
    await asyncio.wait_for(stuck.admitted.wait(), 5)
    stuck.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck.task
    assert turns.running == 0
    async with turns.admit():  # the slot is free again: no queue, so it would be refused otherwise
        pass


async def test_a_waiting_turn_cancelled_in_the_queue_frees_its_place() -> None:
    turns, log = gate(max_turns=1, queue_length=1), list[str]()
    first = Turn(turns, log, "first")
    await settle()
    waiting = Turn(turns, log, "waiting")
    await settle()
    assert turns.waiting == 1
    waiting.task.cancel()
    await asyncio.gather(waiting.task, return_exceptions=True)
    assert turns.waiting == 0
    replacement: Any = Turn(turns, log, "replacement")  # the queue has room again
    await settle()
    assert turns.waiting == 1
    first.release.set()
    replacement.release.set()
    await asyncio.gather(first.task, replacement.task)
    assert log == ["first", "replacement"]
