"""Live audit events across server processes through PostgreSQL LISTEN/NOTIFY.

Every event a process produces is sent (in batches gathered over ``LINGER_S``, off the turn's
path) on the channel
``convengine_audit`` as ``<origin>|<JSON list of events>``; every process listening publishes
what the others sent on its own bus, so an SSE client connected to one process sees turns
processed by another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from datetime import datetime
from typing import Any

from convengine.audit.bus import AuditBus
from convengine.audit.events import AuditEvent

logger = logging.getLogger(__name__)
CHANNEL = "convengine_audit"
MAX_PAYLOAD = 7900  # PostgreSQL's NOTIFY limit is 8000 bytes
LINGER_S = 0.02  # events wait at most this long to be sent together: live enough, a few NOTIFYs a turn
MAX_BATCH = 500


class PgAuditBridge:
    def __init__(self, libpq_url: str, bus: AuditBus) -> None:
        self.url = libpq_url
        self.bus = bus
        self.origin = uuid.uuid4().hex
        self._outbox: asyncio.Queue[AuditEvent] = asyncio.Queue(maxsize=50_000)
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = asyncio.Event()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.bus.add_forwarder(self._enqueue)
        self._tasks = [asyncio.create_task(self._listen(), name="audit-listen"),
                       asyncio.create_task(self._send(), name="audit-notify")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=10)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _enqueue(self, event: AuditEvent) -> None:
        assert self._loop is not None
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._put, event)

    def _put(self, event: AuditEvent) -> None:
        if not self._outbox.full():
            self._outbox.put_nowait(event)

    async def _connect(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    async def _listen(self) -> None:
        while True:
            try:
                async with await self._connect() as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._listening.set()
                    async for notice in conn.notifies():
                        self._receive(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect after a server restart
                logger.warning("audit LISTEN connection lost (%s); reconnecting", exc)
                await asyncio.sleep(1)

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
                        batch = [await self._outbox.get()]
                        await asyncio.sleep(LINGER_S)  # let the turn's next events join this batch
                        while not self._outbox.empty() and len(batch) < MAX_BATCH:
                            batch.append(self._outbox.get_nowait())
                        for chunk in self._chunks(batch):
                            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, chunk))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect after a server restart
                logger.warning("audit NOTIFY connection lost (%s); reconnecting", exc)
                await asyncio.sleep(1)

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
