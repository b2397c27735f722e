"""Live audit events across server processes through PostgreSQL LISTEN/NOTIFY.

Each process tells the others which conversations its live streams watch (channel
``convengine_audit_watch``: ``<origin>|=<id>,<id>...`` when the set changes and every ``REFRESH_S``;
``*`` is a stream of every conversation; ``<origin>|?`` asks everyone to say it now). A process sends
the events of a watched conversation (in batches gathered over ``LINGER_S``, off the turn's path)
on the channel ``convengine_audit`` as ``<origin>|<JSON list of events>``; every process listening
publishes what the others sent on its own bus, so an SSE client connected to one process sees turns
processed by another. Events nobody watches are not sent at all, and their verbose messages are not
even resolved. A stream waits until its watch has been announced before it answers ``CONNECTED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from datetime import datetime
from typing import Any, Protocol

from convengine._internal.turn_io import database_detail
from convengine.audit.bus import AuditBus
from convengine.audit.events import AuditEvent

logger = logging.getLogger(__name__)
CHANNEL = "convengine_audit"
MAX_PAYLOAD = 7900  # PostgreSQL's NOTIFY limit is 8000 bytes
LINGER_S = 0.02  # events wait at most this long to be sent together: live enough, a few NOTIFYs a turn
MAX_BATCH = 500
WATCH_CHANNEL = "convengine_audit_watch"
REFRESH_S = 5.0  # each process repeats what it watches this often ...
EXPIRES_S = 3 * REFRESH_S  # ... and forgets what another said this long after it last said it
ANNOUNCE_WAIT_S = 2.0  # a new stream waits at most this long for its watch to be sent
EVERY = "*"


class Notifier(Protocol):
    """What NOTIFY is sent on: a psycopg connection (psycopg loads only on PostgreSQL)."""

    async def execute(self, query: str, params: tuple[str, str] | None = None) -> object: ...


class _Announce:
    """An outbox marker: send this process's watched conversations (or ask the others for theirs)."""

    __slots__ = ("ask", "sent")

    def __init__(self, *, ask: bool = False) -> None:
        self.ask = ask
        self.sent = asyncio.Event()


class PgAuditBridge:
    def __init__(self, libpq_url: str, bus: AuditBus) -> None:
        self.url = libpq_url
        self.bus = bus
        self.origin = uuid.uuid4().hex
        self._outbox: asyncio.Queue[AuditEvent | _Announce] = asyncio.Queue(maxsize=50_000)
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = asyncio.Event()
        self._remote: dict[str, tuple[frozenset[str], float]] = {}
        """origin -> (conversations its streams watch, when that expires)"""

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.bus.add_forwarder(self._enqueue, self.watched_elsewhere)
        self.bus.on_subscriptions_changed(self._subscriptions_changed)
        self._tasks = [asyncio.create_task(self._listen(), name="audit-listen"),
                       asyncio.create_task(self._send(), name="audit-notify"),
                       asyncio.create_task(self._refresh(), name="audit-watch-refresh")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=10)
        self._schedule(_Announce(ask=True))

    def watched_elsewhere(self, conversation_id: str) -> bool:
        """Whether a stream in another process watches this conversation (so its events are sent)."""
        if not self._remote:
            return False  # asked for every audit event of every turn: most of the time nobody watches
        now = time.monotonic()
        return any(expiry > now and (conversation_id in keys or EVERY in keys)
                   for keys, expiry in self._remote.values())

    async def announced(self) -> None:
        """Return once this process's current watches have been sent to the others (or after a bound)."""
        marker = _Announce()
        self._schedule(marker)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(marker.sent.wait(), timeout=ANNOUNCE_WAIT_S)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _enqueue(self, event: AuditEvent) -> None:
        self._schedule(event)

    def _schedule(self, item: AuditEvent | _Announce) -> None:
        """Put ``item`` in the outbox: directly on the bridge's own loop, else through it (thread-safe)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._put(item)
        else:
            loop.call_soon_threadsafe(self._put, item)

    def _put(self, item: AuditEvent | _Announce) -> None:
        if not self._outbox.full():
            self._outbox.put_nowait(item)

    def _subscriptions_changed(self) -> None:
        self._schedule(_Announce())

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            if self.bus.watched():
                self._put(_Announce())

    async def _connect(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    async def _listen(self) -> None:
        while True:
            try:
                async with await self._connect() as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await conn.execute(f"LISTEN {WATCH_CHANNEL}")
                    self._listening.set()
                    async for notice in conn.notifies():
                        if notice.channel == WATCH_CHANNEL:
                            self._watch_notice(notice.payload)
                        else:
                            self._receive(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect after a server restart
                logger.warning("audit LISTEN connection lost (%s); reconnecting", database_detail(exc))
                await asyncio.sleep(1)

    def _watch_notice(self, payload: str) -> None:
        origin, _, body = payload.partition("|")
        if origin == self.origin:
            return
        if body == "?":
            if self.bus.watched():
                self._put(_Announce())
            return
        if body.startswith("="):
            keys = frozenset(k for k in body[1:].split(",") if k)
            self._remote[origin] = (keys, time.monotonic() + EXPIRES_S)
        elif body.startswith("+") and origin in self._remote:
            keys, expiry = self._remote[origin]
            self._remote[origin] = (keys | {k for k in body[1:].split(",") if k}, expiry)

    def _receive(self, payload: str) -> None:
        origin, _, body = payload.partition("|")
        if origin == self.origin:
            return  # our own events, already published here
        try:
            items = json.loads(body)
        except ValueError:
            return
        for item in items if isinstance(items, list) else []:
            event = AuditEvent(item["conversationId"], item["stage"], item.get("payload") or {},
                               datetime.fromisoformat(item["createdAt"]), item.get("step"), item.get("meta"))
            self.bus.publish(event, forward=False)

    async def _send(self) -> None:
        while True:
            try:
                async with await self._connect() as conn:
                    while True:
                        first = await self._outbox.get()
                        if isinstance(first, _Announce):
                            await self._announce(conn, first)
                            continue
                        batch = [first]
                        await asyncio.sleep(LINGER_S)  # let the turn's next events join this batch
                        markers: list[_Announce] = []
                        while not self._outbox.empty() and len(batch) < MAX_BATCH:
                            item = self._outbox.get_nowait()
                            if isinstance(item, _Announce):
                                markers.append(item)
                            else:
                                batch.append(item)
                        for chunk in self._chunks(batch):
                            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, chunk))
                        for marker in markers:
                            await self._announce(conn, marker)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect after a server restart
                logger.warning("audit NOTIFY connection lost (%s); reconnecting", database_detail(exc))
                await asyncio.sleep(1)

    async def _announce(self, conn: Notifier, marker: _Announce) -> None:
        """``=`` and the watched ids (``+`` for the rest when they do not fit one NOTIFY), or ``?``."""
        if marker.ask:
            bodies = ["?"]
        else:
            keys = sorted(EVERY if k is None else k for k in self.bus.watched())
            bodies, current = [], "="
            for key in keys:
                if len(current) + len(key) + 1 > MAX_PAYLOAD - len(self.origin) - 1:
                    bodies.append(current)
                    current = "+"
                current += ("" if current in ("=", "+") else ",") + key
            bodies.append(current)
        for body in bodies:
            await conn.execute("SELECT pg_notify(%s, %s)", (WATCH_CHANNEL, f"{self.origin}|{body}"))
        marker.sent.set()

    def _chunks(self, events: list[AuditEvent]) -> list[str]:
        """NOTIFY payloads ``<origin>|[event, ...]``, each under PostgreSQL's limit (every event encoded once)."""
        budget = MAX_PAYLOAD - len(self.origin) - 3
        chunks: list[str] = []
        current: list[str] = []
        size = 0
        for event in events:
            encoded = _encode(_item(event))
            if len(encoded.encode()) > budget:
                encoded = _encode({**_item(event), "meta": None,
                                   "payload": {"truncated": True, "note": "payload too large for NOTIFY; see the audit trail"}})
            length = len(encoded.encode()) + 1
            if current and size + length > budget:
                chunks.append(self._wrap(current))
                current, size = [], 0
            current.append(encoded)
            size += length
        if current:
            chunks.append(self._wrap(current))
        return chunks

    def _wrap(self, encoded: list[str]) -> str:
        return f"{self.origin}|[{','.join(encoded)}]"


def _encode(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, default=str)


def _item(event: AuditEvent) -> dict[str, Any]:
    return {"conversationId": event.conversation_id, "stage": event.stage, "payload": event.payload,
            "createdAt": event.created_at.isoformat(), "step": event.step, "meta": event.meta}
