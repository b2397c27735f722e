"""TurnAudit: collects one turn's events for the batch write and streams each one live."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from convengine.audit.bus import AuditBus
from convengine.audit.events import AuditEvent
from convengine.audit.filters import AuditFilter


class TurnAudit:
    """The audit trail of one turn, in order.

    Events that pass the filter are appended to :attr:`events` (written to ce_audit in one
    batch when the turn ends) and published on the live bus as they happen.
    """

    __slots__ = (
        "_bus",
        "_filter",
        "_persist_meta",
        "conversation_id",
        "current_step",
        "events",
        "started",
        "timings",
    )

    def __init__(self, conversation_id: str, *, audit_filter: AuditFilter, bus: AuditBus | None = None,
                 persist_meta: bool = True) -> None:
        self.conversation_id = conversation_id
        self.events: list[AuditEvent] = []
        self.timings: list[tuple[str, float]] = []
        self.current_step: str | None = None
        self._filter = audit_filter
        self._bus = bus
        self._persist_meta = persist_meta
        self.started = time.perf_counter()

    def emit(self, stage: str, payload: dict[str, Any] | None = None, *, intent: str | None = None,
             state: str | None = None) -> None:
        if not self._filter.keep(stage, self.conversation_id, intent):
            return
        now = datetime.now(UTC)
        meta = None
        if self._persist_meta:
            meta = {"stage": stage, "conversationId": self.conversation_id, "emittedAt": now.isoformat(),
                    "intent": intent, "state": state, "step": self.current_step}
        event = AuditEvent(self.conversation_id, stage, dict(payload or {}), now, self.current_step, meta)
        self.events.append(event)
        if self._bus is not None:
            self._bus.publish(event)

    def record_timing(self, step: str, millis: float) -> None:
        self.timings.append((step, millis))

    def total_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
