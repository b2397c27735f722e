"""Work slots: at most so many turns of a process do work (run their steps) at once.

A turn takes a slot once its process's other turns of the same conversation are done, before it takes
its database connection and lock, and gives it back when it has committed. While it
awaits something outside the process (a model, a tool, a sandboxed python node) it lends its slot to a
waiting turn (:func:`waiting_outside`) and takes one again, in order, when the answer is there. So a
CPU-bound pack runs a few turns at a time to completion instead of interleaving every admitted turn
step by step (each turn slower, its transaction open longer, more memory alive at once), and a pack
whose turns wait on a model keeps every admitted turn waiting on the model concurrently.

The slot travels in a context variable: LangGraph's tasks copy the turn's context, so a node's call
finds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar


class _Slot:
    """One turn's hold on a slot (lent while it waits outside)."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self.slots = slots
        self.held = False

    async def take(self) -> None:
        await self.slots.acquire()
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


_CURRENT: ContextVar[_Slot | None] = ContextVar("convengine_work_slot", default=None)


class WorkSlots:
    """A process's work slots (one per engine, on its event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots = asyncio.Semaphore(limit)

    @asynccontextmanager
    async def working(self) -> AsyncIterator[None]:
        """Hold a work slot while the block runs (waiting, in order, for one to free up)."""
        slot = _Slot(self._slots)
        await slot.take()
        token = _CURRENT.set(slot)
        try:
            yield
        finally:
            _CURRENT.reset(token)
            slot.give_back()


@asynccontextmanager
async def waiting_outside() -> AsyncIterator[None]:
    """Around an await on something outside the process: the running turn's work slot is lent to a
    waiting turn meanwhile, and taken back (waiting in order) before the block's caller goes on. Outside
    a turn, or when the slot is already lent (an inner call), it does nothing."""
    slot = _CURRENT.get()
    if slot is None or not slot.held:
        yield
        return
    slot.give_back()
    try:
        yield
    except asyncio.CancelledError:  # the turn is ending: it need not queue for a slot
        raise
    except BaseException:
        await slot.take()  # a failed call (a timeout, a retry to come) still goes on in the turn
        raise
    await slot.take()
