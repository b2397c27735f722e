"""Live SSE streams with bounds: caps on how many are open (in all, per caller, per conversation),
reservations of not-yet-started conversations, and a stream's lifetime and idle timeout.

The counts and reservations live in the serving process (each process of a deployment has its
own caps).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from convengine.api.refusals import ApiRefusal
from convengine.audit.events import AuditEvent
from convengine.catalog.errors import ConversationNotFoundError, ErrorCode
from convengine.settings import StreamLimits

MAX_PENDING = 1000
"""Events a stream holds back while it waits to learn who owns the conversation that just started."""


@dataclass
class StreamRegistry:
    total: int = 0
    by_caller: Counter[str] = field(default_factory=Counter)
    by_conversation: Counter[str] = field(default_factory=Counter)
    reservations: dict[str, tuple[str, int]] = field(default_factory=dict)
    """conversation -> (caller, streams holding it): ids reserved by a stream opened before the first turn."""

    def reserved_by_other(self, conversation_id: str, caller: str) -> bool:
        holder = self.reservations.get(conversation_id)
        return holder is not None and holder[0] != caller

    def open(self, limits: StreamLimits, caller: str, conversation_id: str, *, reserve: bool) -> Lease:
        """Count a new stream (429 TOO_MANY_STREAMS past a cap); ``reserve`` holds the id for the caller."""
        self._check(limits, caller, conversation_id)
        self.total += 1
        self.by_caller[caller] += 1
        self.by_conversation[conversation_id] += 1
        if reserve:
            holder, count = self.reservations.get(conversation_id, (caller, 0))
            self.reservations[conversation_id] = (holder, count + 1)
        return Lease(self, caller, conversation_id, reserve)

    def _check(self, limits: StreamLimits, caller: str, conversation_id: str) -> None:
        caps = ((self.total, limits.max_total, "on this server", "max_total"),
                (self.by_caller[caller], limits.max_per_caller, "per caller", "max_per_caller"),
                (self.by_conversation[conversation_id], limits.max_per_conversation, "per conversation",
                 "max_per_conversation"))
        for count, cap, scope, name in caps:
            if count >= cap:
                raise ApiRefusal(429, ErrorCode.TOO_MANY_STREAMS, f"too many live streams: at most {cap} "
                                 f"{scope} (settings api.streams.{name}); close one or retry later",
                                 {"Retry-After": "5"})

    def release(self, lease: Lease) -> None:
        self.total -= 1
        _decrement(self.by_caller, lease.caller)
        _decrement(self.by_conversation, lease.conversation_id)
        if lease.reserved:
            holder, count = self.reservations[lease.conversation_id]
            if count > 1:
                self.reservations[lease.conversation_id] = (holder, count - 1)
            else:
                del self.reservations[lease.conversation_id]


def _decrement(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


@dataclass
class Lease:
    registry: StreamRegistry
    caller: str
    conversation_id: str
    reserved: bool
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.registry.release(self)


Verify = Callable[[], Awaitable[bool]]


@dataclass
class Watch:
    """The events a stream forwards, until it is over.

    ``lifetime_s`` bounds the whole stream; ``idle_s`` (a conversation that has not started) closes
    it when no event arrives in that time. ``verify`` (with ownership on) is asked, when the first
    event of each turn arrives, whether the caller may read the conversation: the turn's events wait
    until it says yes (the conversation exists and is the caller's); a refusal ends the stream. Asking
    once per turn keeps an open stream from showing a conversation another caller created under the
    same id after the first one was erased.
    """

    queue: asyncio.Queue[AuditEvent]
    lifetime_s: float
    idle_s: float | None = None
    verify: Verify | None = None
    pending: list[AuditEvent] = field(default_factory=list)
    refused: bool = False
    turn: str | None = None
    """The turn whose events were last let through (verified)."""

    async def events(self, disconnected: Callable[[], Awaitable[bool]]) -> AsyncIterator[AuditEvent]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lifetime_s
        idle_until = None if self.idle_s is None else loop.time() + self.idle_s
        while not self.refused and not await disconnected():
            remaining = min(deadline, idle_until or deadline) - loop.time()
            if remaining <= 0:
                return
            event = await _next(self.queue, min(remaining, 1.0))
            if event is not None:
                idle_until = None  # a turn arrived
            for admitted in await self._admit(event):
                yield admitted

    async def _admit(self, event: AuditEvent | None) -> list[AuditEvent]:
        if self.verify is None:
            return [] if event is None else [event]
        if event is not None:
            if not self.pending and self.turn is not None and _turn_of(event) == self.turn:
                return [event]  # a turn already verified
            self.pending.append(event)
        if not self.pending:
            return []
        if not await self._verified() or self.refused:
            self.refused = self.refused or len(self.pending) > MAX_PENDING
            return []
        admitted, self.pending = self.pending, []
        self.turn = _turn_of(admitted[-1])
        return admitted

    async def _verified(self) -> bool:
        assert self.verify is not None
        try:
            return await self.verify()
        except ConversationNotFoundError:  # someone else's conversation started under this id
            self.refused = True
            return False


def _turn_of(event: AuditEvent) -> str | None:
    """The turn that emitted ``event`` (events from another process carry it in their ``_meta``)."""
    meta = event.meta if isinstance(event.meta, dict) else {}
    return event.turn_id or meta.get("turnId")


async def _next(queue: asyncio.Queue[AuditEvent], timeout: float) -> AuditEvent | None:
    try:
        return await asyncio.wait_for(queue.get(), timeout=timeout)
    except TimeoutError:
        return None
