"""Admission of turns: at most ``admission.max_turns`` run at once in a process, a bounded queue waits.

Each admitted turn holds at most one connection of the turn pool at a time, so with the limit below
the pool's size no turn waits long for a connection: the turns past the limit wait here, in order,
for at most ``admission.queue_timeout_s``, and past ``admission.queue_length`` waiting turns a turn
is refused at once with :class:`~convengine.catalog.errors.ServerBusyError` (HTTP 503 with ``Retry-After``)
before anything of it runs or is written. Without this a load of concurrent turns larger than the
pool queued inside the pool instead, and failed after its 30 s timeout.

Of the admitted turns, at most ``admission.max_working_turns`` (4 per CPU unless set) do work at once
(:mod:`convengine._internal.working`): the rest wait, holding their place, and a turn waiting on a
model or a tool lends its work slot meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from convengine._internal.working import WorkSlots
from convengine.catalog.errors import ServerBusyError
from convengine.settings import AdmissionSettings

READ_RESERVE_SHARE = 10
"""The default limit keeps one connection in this many for reads outside turns."""


def default_max_turns(pool_capacity: int) -> int:
    """The pool's connections less a tenth (at least one) kept for reads: 100 -> 90, 15 -> 13."""
    reserve = max(1, -(-pool_capacity // READ_RESERVE_SHARE))
    return max(1, pool_capacity - reserve)


WORKING_TURNS_PER_CPU = 4
"""The default ``admission.max_working_turns`` per CPU."""


def default_working_turns() -> int:
    return WORKING_TURNS_PER_CPU * (os.cpu_count() or 1)


@dataclass(frozen=True)
class AdmissionLimits:
    max_turns: int
    queue_length: int
    queue_timeout_s: float
    retry_after_s: int
    max_working_turns: int = field(default_factory=default_working_turns)

    @classmethod
    def of(cls, settings: AdmissionSettings, pool_capacity: int) -> AdmissionLimits:
        """The limits of ``settings``, the turn limit sized from the pool when not set."""
        max_turns = settings.max_turns or default_max_turns(pool_capacity)
        working = settings.max_working_turns or default_working_turns()
        return cls(max_turns, settings.queue_length, settings.queue_timeout_s, settings.retry_after_s, working)


class TurnGate:
    """The process's turn slots and their queue (one per engine, on its event loop)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(limits.max_turns)
        self.work = WorkSlots(limits.max_working_turns)
        """The admitted turns' work slots: a turn takes one before its connection and database lock."""
        self._running = 0
        self._waiting = 0

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return self._waiting

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold a turn slot while the block runs; ServerBusyError when none frees up in time or the
        queue is full."""
        limits = self.limits
        if self._slots.locked() and self._waiting >= limits.queue_length:
            raise self._busy(f"the server is running {limits.max_turns} turns and {self._waiting} more are "
                             f"waiting (settings admission.max_turns, admission.queue_length); retry in "
                             f"{limits.retry_after_s}s")
        self._waiting += 1
        try:
            async with asyncio.timeout(limits.queue_timeout_s):  # no task per acquire, as wait_for makes
                await self._slots.acquire()
        except TimeoutError:
            raise self._busy(f"no turn slot freed up within {limits.queue_timeout_s:g}s (settings "
                             f"admission.queue_timeout_s); retry in {limits.retry_after_s}s") from None
        finally:
            self._waiting -= 1
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self._slots.release()

    def _busy(self, message: str) -> ServerBusyError:
        return ServerBusyError(message, retry_after_s=self.limits.retry_after_s)
