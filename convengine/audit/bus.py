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
        self._forwarders: list[tuple[Callable[[AuditEvent], None], Callable[[str], bool] | None]] = []
        self._watchers: list[Callable[[], None]] = []

    def subscribe(self, conversation_id: str | None = None, *, maxsize: int = DEFAULT_QUEUE_SIZE) -> Subscription:
        """Start receiving events (of one conversation, or all); call from the consumer's loop."""
        sub = Subscription(conversation_id, asyncio.Queue(maxsize), asyncio.get_running_loop())
        with self._lock:
            self._subs.append(sub)
        self._changed()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub not in self._subs:
                return
            self._subs.remove(sub)
        self._changed()

    def add_forwarder(self, forward: Callable[[AuditEvent], None],
                      wants: Callable[[str], bool] | None = None) -> None:
        """Also hand locally produced events to ``forward`` (e.g. cross-process NOTIFY): every event, or
        those of the conversations ``wants(conversation_id)`` names (someone elsewhere is watching them)."""
        self._forwarders.append((forward, wants))

    def on_subscriptions_changed(self, watcher: Callable[[], None]) -> None:
        """Call ``watcher`` after each subscribe and unsubscribe (e.g. to tell other processes)."""
        self._watchers.append(watcher)

    def watched(self) -> set[str | None]:
        """The conversations local subscribers watch (None: a subscriber to every conversation)."""
        with self._lock:
            return {s.conversation_id for s in self._subs}

    def subscriber_count(self) -> int:
        return len(self._subs)

    def has_subscribers(self, conversation_id: str | None = None) -> bool:
        """Whether anyone would receive an event (of ``conversation_id``; None: of any conversation)."""
        # asked for every audit event of every turn: plain loops, no generator per call
        for sub in self._subs:
            if conversation_id is None or sub.conversation_id in (None, conversation_id):
                return True
        for _, wants in self._forwarders:
            if wants is None or conversation_id is None or wants(conversation_id):
                return True
        return False

    def publish(self, event: AuditEvent, *, forward: bool = True) -> None:
        with self._lock:
            targets = [s for s in self._subs if s.conversation_id in (None, event.conversation_id)]
        for sub in targets:
            sub.deliver(event)
        if forward:
            for fwd, wants in self._forwarders:
                if wants is None or wants(event.conversation_id):
                    fwd(event)

    def _changed(self) -> None:
        for watcher in self._watchers:
            watcher()
