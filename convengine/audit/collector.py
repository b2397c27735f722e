"""TurnAudit: collects one turn's events for the batch write and streams each one live."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from convengine.audit.bus import AuditBus
from convengine.audit.events import AuditEvent
from convengine.audit.filters import AuditFilter
from convengine.catalog import stages

logger = logging.getLogger(__name__)

VERBOSE_STAGE = stages.VERBOSE
"""The stage (and SSE event name) of a verbose message; reserved, never stored."""


def verbose_event(conversation_id: str, step: str | None, body: dict[str, Any]) -> AuditEvent:
    """The live-only event that carries a verbose message (payload ``{"verbose": body}``)."""
    return AuditEvent(conversation_id, VERBOSE_STAGE, {"verbose": body}, datetime.now(UTC), step, None)


class VerboseResolver(Protocol):
    """Resolves a stage's ce_verbose message (templates/verbose.py's VerbosePublisher renders its templates)."""

    def resolve(self, stage: str, stage_payload: Mapping[str, Any], *, conversation_id: str, intent: str | None,
                state: str | None, step_names: Sequence[str], turn: Any = None) -> dict[str, Any] | None: ...


class TurnAudit:
    """The audit trail of one turn, in order.

    Events that pass the filter are built, appended to :attr:`events` (written as the turn's one
    ``ce_audit_turn`` row when it ends) and published on the live bus as they happen, when anyone
    listens there (a subscriber or a forwarder to other processes); nothing is built for an event
    the filter drops.
    """

    __slots__ = (
        "_bus",
        "_filter",
        "_persist_meta",
        "_step_names",
        "_turn",
        "conversation_id",
        "current_step",
        "events",
        "started",
        "timings",
        "turn_id",
        "verbose",
    )

    def __init__(self, conversation_id: str, *, audit_filter: AuditFilter, bus: AuditBus | None = None,
                 persist_meta: bool = True, turn_id: str | None = None) -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        """The turn every event of this trail belongs to (None: not a turn, e.g. an undo)."""
        self.events: list[AuditEvent] = []
        self.timings: list[tuple[str, float]] = []
        self.current_step: str | None = None
        self._filter = audit_filter
        self._bus = bus
        self._persist_meta = persist_meta
        self.started = time.perf_counter()
        self.verbose: VerboseResolver | None = None
        """Resolves each stage's ce_verbose message (streamed, never stored); None: no verbose messages."""
        self._turn: Any = None
        self._step_names: tuple[str, ...] = ()

    def enter_step(self, step: str, step_class: str | None = None, turn: Any = None) -> None:
        """The step now running: its name, ConvEngine class name and turn (verbose rows match and render on them)."""
        self.current_step = step
        self._step_names = (step_class, step) if step_class and step_class != step else (step,)
        self._turn = turn

    def leave_step(self) -> None:
        self.current_step = None
        self._step_names = ()
        self._turn = None

    def emit(self, stage: str, payload: dict[str, Any] | None = None, *, intent: str | None = None,
             state: str | None = None) -> None:
        try:
            self._record(stage, payload, intent, state)
        finally:
            self._speak(stage, payload, intent, state)  # verbose messages do not depend on the audit filter

    def _record(self, stage: str, payload: dict[str, Any] | None, intent: str | None, state: str | None) -> None:
        if not self._filter.keep(stage, self.conversation_id, intent):
            return
        now = datetime.now(UTC)
        meta = self._meta(stage, now, intent, state, self.current_step)
        event = AuditEvent(self.conversation_id, stage, dict(payload or {}), now, self.current_step, meta,
                           turn_id=self.turn_id)
        self.events.append(event)
        if self._bus is not None and self._bus.has_subscribers(self.conversation_id):
            self._bus.publish(event)

    def stamped(self, event: AuditEvent) -> AuditEvent:
        """``event``, made outside the trail (the failure of its turn), as one of the trail's own: its
        turn id, stored in ``_meta`` like every other event's (unless ``_meta`` is not kept)."""
        step = event.payload.get("step")
        meta = self._meta(event.stage, event.created_at, None, None, step if isinstance(step, str) else None)
        return replace(event, meta=meta, turn_id=self.turn_id)

    def _meta(self, stage: str, at: datetime, intent: str | None, state: str | None,
              step: str | None) -> dict[str, Any] | None:
        if not self._persist_meta:
            return None
        return {"stage": stage, "conversationId": self.conversation_id, "emittedAt": at.isoformat(),
                "intent": intent, "state": state, "step": step, "turnId": self.turn_id}

    def _speak(self, stage: str, payload: dict[str, Any] | None, intent: str | None, state: str | None) -> None:
        """Stream the stage's verbose message, if a ce_verbose row has one (and anyone listens)."""
        if self.verbose is None or self._bus is None or not self._step_names or not self._bus.has_subscribers(self.conversation_id):
            return
        try:
            body = self.verbose.resolve(stage, payload or {}, conversation_id=self.conversation_id, intent=intent,
                                        state=state, step_names=self._step_names, turn=self._turn)
        except Exception:
            logger.warning("no verbose message for %s: resolving it failed", stage, exc_info=True)
            return
        if body is not None:
            self._bus.publish(verbose_event(self.conversation_id, self.current_step, body))

    def record_timing(self, step: str, millis: float) -> None:
        self.timings.append((step, millis))

    def total_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
