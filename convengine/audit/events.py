"""AuditEvent: one entry of the audit trail, as stored in ``ce_audit`` and streamed live."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """An audit stage with its payload.

    Attributes:
        conversation_id: the conversation the event belongs to.
        stage: ConvEngine's stage name (``USER_INPUT``, ``RULE_MATCH (RulesStep)``...).
        payload: the stage's data (JSON-serialisable).
        created_at: when it happened (UTC).
        step: the pipeline step that emitted it, when one was running.
        meta: ``_meta`` enrichment (stage, conversationId, emittedAt, intent, state, step, turnId).
        audit_id: the ce_audit row id once stored (None while the turn runs).
        turn_id: the turn that emitted it (the request's ``turn_id``); stored as ``_meta.turnId``, so
            None for events outside a turn (undo, feedback) and for rows stored without ``_meta``.
    """

    conversation_id: str
    stage: str
    payload: dict[str, Any]
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    step: str | None = None
    meta: dict[str, Any] | None = None
    audit_id: int | None = None
    turn_id: str | None = None

    def stored_payload(self) -> dict[str, Any]:
        """The payload as written to ``ce_audit.payload_json`` (with ``_meta`` when kept)."""
        if self.meta is None:
            return self.payload
        return {**self.payload, "_meta": self.meta}

    def row_payload(self, at: str | None = None) -> dict[str, Any]:
        """The payload as ``ce_audit.payload_json`` holds it: ``_meta`` without what the row already says
        (its stage, conversation and time columns, and the payload's own intent, state and step; a key
        absent from both is null); :func:`expand_meta` restores it on reading."""
        if self.meta is None:
            return self.payload
        implied = _implied_meta(self.stage, self.conversation_id, self.created_at, self.payload, at)
        compact = {k: v for k, v in self.meta.items() if k not in implied or implied[k] != v}
        return {**self.payload, "_meta": compact}

    def to_dict(self) -> dict[str, Any]:
        """ConvEngine's audit-row shape: ``{auditId, conversationId, stage, payloadJson, createdAt}``,
        ``payloadJson`` being the stored JSON as a string (its clients ``JSON.parse`` it)."""
        return {
            "auditId": self.audit_id,
            "conversationId": self.conversation_id,
            "stage": self.stage,
            "payloadJson": json.dumps(self.stored_payload(), ensure_ascii=False, default=str),
            "createdAt": self.created_at.isoformat(),
        }


_FROM_PAYLOAD = ("intent", "state", "step")


def _implied_meta(stage: str, conversation_id: str, created_at: datetime, payload: dict[str, Any],
                  at: str | None = None) -> dict[str, Any]:
    """The ``_meta`` a row implies: its columns (``at``: ``created_at`` in ISO form, when known), and the
    payload's own intent, state and step."""
    return {"stage": stage, "conversationId": conversation_id,
            "emittedAt": at or created_at.astimezone(UTC).isoformat(),
            **{key: payload.get(key) for key in _FROM_PAYLOAD}}


def expand_meta(stored: dict[str, Any], stage: str, conversation_id: str, created_at: datetime,
                payload: dict[str, Any]) -> dict[str, Any]:
    """The full ``_meta`` of a stored row (the inverse of :meth:`AuditEvent.row_payload`)."""
    return {**_implied_meta(stage, conversation_id, created_at, payload), **stored}
