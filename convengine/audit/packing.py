"""A turn's audit events packed into one compact value (one ``ce_audit_turn`` row) and back.

The row's columns say the conversation and the first event's time; the packed value holds, per
event, its stage, its time as microseconds after the row's, its payload and the ``_meta`` entries
that differ from what the row implies (stage, conversation, time, the turn's id; intent, state and
step absent). Unpacking gives the very events ``ce_audit`` rows give: same stages, payloads,
``_meta`` (same keys, same order), times and turn ids. The JSON is zlib-compressed with a preset
dictionary (``packing_v1.zdict``: payload keys, the stage and node names of format 1, frozen with
it): a turn's events repeat the same keys and step names, so the row is about a sixth of the text.

Stored bytes are untrusted when read back: a value that is not a packed trail, or that would
unpack to more than :data:`MAX_UNPACKED_BYTES`, raises :class:`PackedAuditError` (``AUDIT_ROW_REJECTED``)
naming the row.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

from convengine.audit.events import AuditEvent
from convengine.catalog.errors import AuditRowRejectedError

FORMAT = 1
"""The packed layout's version, stored in every value (``{"v": 1, ...}``)."""
EVENTS_PER_ROW = 1000
"""Events per row; a turn with more takes several rows. An event's ``auditId`` is its row's id times
this, plus its index in the row, so ids stay unique and in order across rows."""
MAX_UNPACKED_BYTES = 64 * 1024 * 1024
"""A stored value unpacking to more than this is refused (a corrupt or hostile row)."""
_LEVEL = 3
"""zlib level: 3 packs a support-desk turn in half the time of 6 for about 10% more bytes (2.99 KB against 2.68 KB)."""
ZDICT = Path(__file__).with_name("packing_v1.zdict").read_bytes()
"""zlib's preset dictionary of format 1; never edited (rows written with it need the very bytes)."""
_META_ORDER = ("stage", "conversationId", "emittedAt", "intent", "state", "step", "turnId")
_NULL_BY_DEFAULT = ("intent", "state", "step")


class PackedAuditError(AuditRowRejectedError):
    """A stored row is not a packed audit trail this version can read (``AUDIT_ROW_REJECTED``)."""


Recorded = tuple[str, dict[str, Any], int, "str | None", "str | None", "str | None"]
"""An event as a turn records it before anyone reads it: stage, payload, time (microseconds since the
Unix epoch, :func:`now_micros`), intent, state, step."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_micros() -> int:
    """The time now as a recorded event holds it: microseconds since the Unix epoch (the clock
    ``datetime.now`` reads; an integer is cheaper to take and subtract, and a turn records ~80)."""
    return time.time_ns() // 1000


def recorded_time(micros: int) -> datetime:
    """A recorded time as the UTC datetime of the event it builds into."""
    return EPOCH + timedelta(microseconds=micros)


@runtime_checkable
class PackableTrail(Protocol):
    """A turn's events that pack themselves (:class:`convengine.audit.collector.Trail`)."""

    conversation_id: str

    def pack_rows(self, dumps: Callable[[Any], str]) -> list[tuple[datetime, bytes]]: ...


def packable(events: Sequence[AuditEvent]) -> PackableTrail | None:
    """``events`` when they pack themselves (a turn's own trail), else None. Plain attribute checks: an
    ``isinstance`` against the runtime-checkable protocol costs about 13 us, and a turn's commit asks twice."""
    if hasattr(events, "pack_rows") and hasattr(events, "conversation_id"):
        return cast(PackableTrail, events)
    return None


def pack_recorded(recorded: Sequence[Recorded], turn: str | None, with_meta: bool,
                  dumps: Callable[[Any], str]) -> list[tuple[datetime, bytes]]:
    """The rows of a turn's recorded events, as :func:`pack` writes the events they build into (their
    ``_meta`` is the implied one: the row's conversation, each event's stage and time, the turn's id;
    only intent, state and step are stored, when set). Nothing is built per event but its item."""
    rows = []
    for start in range(0, len(recorded), EVENTS_PER_ROW):
        chunk = recorded[start:start + EVENTS_PER_ROW]
        base = chunk[0][2]
        items = [[stage, at - base, payload, _differing(intent, state, step) if with_meta else None]
                 for stage, payload, at, intent, state, step in chunk]
        rows.append((recorded_time(base), _compressed(dumps({"v": FORMAT, "t": turn, "e": items}))))
    return rows


def _differing(intent: str | None, state: str | None, step: str | None) -> dict[str, Any]:
    diff = {}
    if intent is not None:
        diff["intent"] = intent
    if state is not None:
        diff["state"] = state
    if step is not None:
        diff["step"] = step
    return diff


def chunks(events: Sequence[AuditEvent]) -> list[Sequence[AuditEvent]]:
    """``events`` cut into rows of at most :data:`EVENTS_PER_ROW`."""
    return [events[i:i + EVENTS_PER_ROW] for i in range(0, len(events), EVENTS_PER_ROW)]


def pack(events: Sequence[AuditEvent], dumps: Callable[[Any], str]) -> tuple[datetime, bytes]:
    """The row of ``events`` (at most :data:`EVENTS_PER_ROW`, one conversation): its time and value.
    ``dumps`` writes JSON text (the engine's, as for every stored JSON value)."""
    base = _utc(events[0].created_at)
    turn = next((e.meta.get("turnId") for e in events if e.meta is not None), None)
    items = [[e.stage, _offset(e.created_at, base), e.payload, _meta_item(e, turn)] for e in events]
    return base, _compressed(dumps({"v": FORMAT, "t": turn, "e": items}))


def _compressed(text: str) -> bytes:
    deflate = zlib.compressobj(_LEVEL, zdict=ZDICT)
    return deflate.compress(text.encode()) + deflate.flush()


def unpack(row_id: int, conversation_id: str, created_at: datetime, value: bytes) -> list[AuditEvent]:
    """The events of one stored row, ``auditId`` set (the inverse of :func:`pack`)."""
    doc = _load(row_id, value)
    turn = doc.get("t")
    events = []
    for index, item in enumerate(doc["e"]):
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and isinstance(item[1], int)
                and isinstance(item[2], dict)):
            raise PackedAuditError(f"ce_audit_turn row {row_id}: event {index} is not [stage, time, payload, meta]")
        stage, offset, payload, meta_item = item
        at = created_at + timedelta(microseconds=offset)
        meta = _meta(meta_item, stage, conversation_id, at, turn, row_id)
        turn_id = (meta or {}).get("turnId")
        events.append(AuditEvent(conversation_id, stage, payload, at, (meta or {}).get("step"), meta,
                                 row_id * EVENTS_PER_ROW + index, turn_id if isinstance(turn_id, str) else None))
    return events


def _meta_item(event: AuditEvent, turn: Any) -> Any:
    """None (no ``_meta``), the entries differing from the implied ``_meta`` (a dict), or ``[meta]`` when
    its keys are not the usual ones. (Compares key by key: this runs for every event of every turn.)"""
    meta = event.meta
    if meta is None:
        return None
    if tuple(meta) != _META_ORDER:
        return [meta]
    diff = {}
    if meta["stage"] != event.stage:
        diff["stage"] = meta["stage"]
    if meta["conversationId"] != event.conversation_id:
        diff["conversationId"] = meta["conversationId"]
    at = event.created_at
    if meta["emittedAt"] != (at if at.tzinfo is UTC else _utc(at)).isoformat():
        diff["emittedAt"] = meta["emittedAt"]
    for key in _NULL_BY_DEFAULT:
        if meta[key] is not None:
            diff[key] = meta[key]
    if meta["turnId"] != turn:
        diff["turnId"] = meta["turnId"]
    return diff


def _implied(stage: str, conversation_id: str, at: datetime, turn: Any) -> dict[str, Any]:
    return {"stage": stage, "conversationId": conversation_id, "emittedAt": at.isoformat(), "intent": None,
            "state": None, "step": None, "turnId": turn}


def _meta(item: Any, stage: str, conversation_id: str, at: datetime, turn: Any, row_id: int) -> dict[str, Any] | None:
    if item is None:
        return None
    if isinstance(item, list) and len(item) == 1 and isinstance(item[0], dict):
        return dict(item[0])
    if not isinstance(item, dict):
        raise PackedAuditError(f"ce_audit_turn row {row_id}: an event's _meta is neither null, an object nor [object]")
    return {**_implied(stage, conversation_id, _utc(at), turn), **item}


def _load(row_id: int, value: bytes) -> dict[str, Any]:
    try:
        inflate = zlib.decompressobj(zdict=ZDICT)
        text = inflate.decompress(bytes(value), MAX_UNPACKED_BYTES)
        if inflate.unconsumed_tail:
            raise PackedAuditError(f"ce_audit_turn row {row_id} unpacks to more than {MAX_UNPACKED_BYTES:,} bytes")
        if not inflate.eof:
            raise PackedAuditError(f"ce_audit_turn row {row_id} is truncated")
        doc = json.loads(text)
    except (zlib.error, ValueError, TypeError) as exc:
        raise PackedAuditError(f"ce_audit_turn row {row_id} is not a packed audit trail: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != FORMAT or not isinstance(doc.get("e"), list):
        raise PackedAuditError(f"ce_audit_turn row {row_id}: unknown packed format (expected version {FORMAT})")
    return doc


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _offset(at: datetime, base: datetime) -> int:
    """Microseconds from ``base`` (UTC) to ``at``."""
    return _micros((at if at.tzinfo is UTC else _utc(at)) - base)


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
