"""TurnAudit: collects one turn's events for the batch write and streams each one live."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from convengine.audit import packing
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


class Trail(Sequence[AuditEvent]):
    """A turn's kept events, in order.

    An event is recorded as a plain tuple (stage, payload, time, intent, state, step) and built into
    an :class:`AuditEvent` (with its ``_meta``) only when read: by a live subscriber, the turn view or
    a failure. A turn that nobody watches only packs its events into its row, which
    :meth:`pack_rows` does from the tuples, so the events it writes are the ones reading them builds.
    """

    __slots__ = ("_built", "_raw", "conversation_id", "persist_meta", "turn_id")

    def __init__(self, conversation_id: str, turn_id: str | None, persist_meta: bool) -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.persist_meta = persist_meta
        self._raw: list[packing.Recorded] | None = []
        """The recorded tuples (None once :meth:`replace` put built events in their place)."""
        self._built: list[AuditEvent] = []

    def record(self, entry: packing.Recorded) -> None:
        if self._raw is None:
            self._built.append(self._build(entry))
        else:
            self._raw.append(entry)

    def latest(self) -> AuditEvent:
        """The last event recorded, built."""
        return self._events()[-1]

    def replace(self, events: Iterable[AuditEvent]) -> None:
        """Put ``events`` (built, e.g. masked) in place of what was recorded."""
        self._built = list(events)
        self._raw = None

    def entries(self) -> list[tuple[str, str | None, dict[str, Any]]]:
        """(stage, step, payload) of each event, without building the events."""
        if self._raw is None:
            return [(e.stage, e.step, e.payload) for e in self._built]
        return [(r[0], r[5], r[1]) for r in self._raw]

    def pack_rows(self, dumps: Callable[[Any], str]) -> list[tuple[Any, bytes]]:
        """The turn's ``ce_audit_turn`` rows (:func:`packing.pack_recorded`, or :func:`packing.pack`
        of the built events once they were replaced)."""
        if self._raw is None:
            return [packing.pack(chunk, dumps) for chunk in packing.chunks(self._built)]
        return packing.pack_recorded(self._raw, self.turn_id if self.persist_meta else None, self.persist_meta, dumps)

    def __len__(self) -> int:
        return len(self._built) if self._raw is None else len(self._raw)

    def __getitem__(self, index: Any) -> Any:
        return self._events()[index]

    def __iter__(self) -> Iterator[AuditEvent]:
        return iter(self._events())

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, list) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _events(self) -> list[AuditEvent]:
        if self._raw is not None:
            self._built.extend(self._build(r) for r in self._raw[len(self._built):])
        return self._built

    def _build(self, entry: packing.Recorded) -> AuditEvent:
        stage, payload, micros, intent, state, step = entry
        at = packing.recorded_time(micros)
        meta = None
        if self.persist_meta:
            meta = {"stage": stage, "conversationId": self.conversation_id, "emittedAt": at.isoformat(),
                    "intent": intent, "state": state, "step": step, "turnId": self.turn_id}
        return AuditEvent(self.conversation_id, stage, payload, at, step, meta, turn_id=self.turn_id)


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
        self.events = Trail(conversation_id, turn_id, persist_meta)
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

    def emit(self, stage: str, payload: Mapping[str, Any] | None = None, *, intent: str | None = None,
             state: str | None = None) -> None:
        bus = self._bus  # asked once per event: a listener does not come or go within it
        listening = bus is not None and bus.has_subscribers(self.conversation_id)
        try:
            if self._filter.keep(stage, self.conversation_id, intent):
                self.events.record((stage, dict(payload) if payload else {}, packing.now_micros(), intent, state,
                                    self.current_step))
                if listening:
                    bus.publish(self.events.latest())  # type: ignore[union-attr]
        finally:
            if listening and self.verbose is not None and self._step_names:
                self._speak(stage, payload, intent, state)  # verbose messages do not depend on the audit filter

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

    def _speak(self, stage: str, payload: Mapping[str, Any] | None, intent: str | None, state: str | None) -> None:
        """Stream the stage's verbose message, if a ce_verbose row has one (the caller checked that anyone listens)."""
        assert self.verbose is not None and self._bus is not None
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
