"""Live fan-out of audit events to subscribers while a turn runs (SSE, notebooks, tests).

Subscribers get an ``asyncio.Queue`` bound to their own event loop; publishing is safe
from any thread or loop. A slow subscriber loses its oldest events rather than slowing a
turn down (the stored audit trail stays complete).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from convengine.audit.events import AuditEvent

DEFAULT_QUEUE_SIZE = 10_000


@dataclass(eq=False)
class Subscription:
    """One subscriber's queue; ``conversation_id`` None means every conversation."""

    conversation_id: str | None
    queue: asyncio.Queue[AuditEvent]
    loop: asyncio.AbstractEventLoop

    def deliver(self, event: AuditEvent) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._put(event)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._put, event)

    def _put(self, event: AuditEvent) -> None:
        if self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(event)


class AuditBus:
    """In-process publish/subscribe of audit events, keyed by conversation id."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()
        self._forwarders: list[Callable[[AuditEvent], None]] = []

    def subscribe(self, conversation_id: str | None = None, *, maxsize: int = DEFAULT_QUEUE_SIZE) -> Subscription:
        """Start receiving events (of one conversation, or all); call from the consumer's loop."""
        sub = Subscription(conversation_id, asyncio.Queue(maxsize), asyncio.get_running_loop())
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def add_forwarder(self, forward: Callable[[AuditEvent], None]) -> None:
        """Also hand every locally produced event to ``forward`` (e.g. cross-process NOTIFY)."""
        self._forwarders.append(forward)

    def subscriber_count(self) -> int:
        return len(self._subs)

    def has_subscribers(self) -> bool:
        return bool(self._subs) or bool(self._forwarders)

    def publish(self, event: AuditEvent, *, forward: bool = True) -> None:
        with self._lock:
            targets = [s for s in self._subs if s.conversation_id in (None, event.conversation_id)]
        for sub in targets:
            sub.deliver(event)
        if forward:
            for fwd in self._forwarders:
                fwd(event)
