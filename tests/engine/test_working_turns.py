"""Work slots (``admission.max_working_turns``): of the admitted turns, at most so many run their steps at
once; the others wait in order, and a turn waiting on its model lends its slot meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from convengine._internal.working import WorkSlots, waiting_outside
from convengine.catalog import names
from convengine.engine.admission import AdmissionLimits, default_working_turns
from convengine.llm import Delay, LlmCall, ScriptedLLM
from convengine.nodes.context import StepHook
from convengine.settings import AdmissionSettings
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio


class Overlap:
    """A step hook that stays in its step a moment and counts the turns inside it at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0

    async def __call__(self, step: str, turn: Any) -> None:
        self.inside += 1
        self.most = max(self.most, self.inside)
        await asyncio.sleep(0.05)
        self.inside -= 1


async def overlap_of(db_url: str, working: int, turns: int = 6) -> int:
    overlap = Overlap()
    hook = StepHook(before=overlap, steps=(names.RULES,))
    async with engine_on(db_url, pack(), hooks=[hook], admission={"max_working_turns": working}) as engine:
        results = await asyncio.gather(*(engine.aprocess("hello", f"00000000-0000-4000-8000-00000000000{i}")
                                         for i in range(turns)))
    assert [r.payload.value for r in results] == ["Hello there"] * turns
    return overlap.most


async def test_past_the_limit_turns_do_their_work_a_few_at_a_time(db_url: str) -> None:
    assert await overlap_of(db_url, working=2) == 2
    assert await overlap_of(db_url, working=6) > 2  # the setting is what held them back


async def test_a_turn_waiting_on_its_model_lends_its_slot_to_another_turn(db_url: str) -> None:
    asked = asyncio.Event()

    def agent(call: LlmCall) -> Any:
        reply = {"intent": "LOAN", "confidence": 1}
        if "slowly" in call.user_text:
            asked.set()
            return Delay(1.5, reply)
        return reply

    llm = ScriptedLLM({"INTENT_AGENT": agent}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    data = pack()
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "REGEX_THEN_LLM"
    async with engine_on(db_url, data, llm=llm, admission={"max_working_turns": 1}) as engine:
        slow = asyncio.create_task(engine.aprocess("hmm, slowly"))
        await asyncio.wait_for(asked.wait(), 10)
        quick = await asyncio.wait_for(engine.aprocess("hmm, now"), 1.0)  # one slot, lent by the slow turn
        assert quick.intent == "LOAN" and not slow.done()
        assert (await slow).intent == "LOAN"


async def test_the_default_is_four_per_cpu_and_a_setting_wins() -> None:
    assert AdmissionLimits.of(AdmissionSettings(), 100).max_working_turns == default_working_turns()
    assert AdmissionLimits.of(AdmissionSettings(max_working_turns=3), 100).max_working_turns == 3


async def test_a_lent_slot_is_taken_back_in_order_and_never_lost() -> None:
    slots, log = WorkSlots(1), list[str]()
    outside = asyncio.Event()

    async def lender() -> None:
        async with slots.working():
            async with waiting_outside():
                outside.set()
                await asyncio.sleep(0.05)
            log.append("lender back")

    async def other() -> None:
        await outside.wait()
        async with slots.working():
            log.append("other working")
            await asyncio.sleep(0.05)
            log.append("other done")

    await asyncio.gather(lender(), other())
    assert log == ["other working", "other done", "lender back"]

    async def failing() -> None:
        async with slots.working(), waiting_outside():
            raise TimeoutError

    with pytest.raises(TimeoutError):
        await failing()
    cancelled = asyncio.create_task(lender())
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled

    async def again() -> None:
        async with slots.working(), waiting_outside():
            pass

    await asyncio.wait_for(again(), 1)  # every path gave its slot back
