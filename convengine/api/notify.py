"""Live audit events across server processes through PostgreSQL LISTEN/NOTIFY.

Every event a process produces is sent (in batches, off the turn's path) on the channel
``convengine_audit``; every process listening publishes what the others sent on its own
bus, so an SSE client connected to one process sees turns processed by another.
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
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if message.get("origin") == self.origin:
            return
        for item in message.get("events", []):
            event = AuditEvent(item["conversationId"], item["stage"], item.get("payload") or {},
                               datetime.fromisoformat(item["createdAt"]), item.get("step"), item.get("meta"))
            self.bus.publish(event, forward=False)

    async def _send(self) -> None:
        while True:
            try:
                async with await self._connect() as conn:
                    while True:
                        batch = [await self._outbox.get()]
                        while not self._outbox.empty() and len(batch) < 50:
                            batch.append(self._outbox.get_nowait())
                        for chunk in self._chunks(batch):
                            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, chunk))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reconnect after a server restart
                logger.warning("audit NOTIFY connection lost (%s); reconnecting", exc)
                await asyncio.sleep(1)

    def _chunks(self, events: list[AuditEvent]) -> list[str]:
        chunks: list[str] = []
        current: list[dict[str, Any]] = []
        for event in events:
            item = _item(event)
            if len(json.dumps(item, ensure_ascii=False, default=str).encode()) > MAX_PAYLOAD - 100:
                item["payload"] = {"truncated": True, "note": "payload too large for NOTIFY; see the audit trail"}
                item["meta"] = None
            trial = current + [item]
            if current and len(self._encode(trial).encode()) > MAX_PAYLOAD:
                chunks.append(self._encode(current))
                current = [item]
            else:
                current = trial
        if current:
            chunks.append(self._encode(current))
        return chunks

    def _encode(self, items: list[dict[str, Any]]) -> str:
        return json.dumps({"origin": self.origin, "events": items}, ensure_ascii=False, default=str)


def _item(event: AuditEvent) -> dict[str, Any]:
    return {"conversationId": event.conversation_id, "stage": event.stage, "payload": event.payload,
            "createdAt": event.created_at.isoformat(), "step": event.step, "meta": event.meta}
