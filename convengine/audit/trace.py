"""The step/stage tree of a conversation's audit trail (ConvEngine's ``/audit/{id}/trace``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.audit.events import AuditEvent
from convengine.catalog import stages as audit_stages


def empty_trace(conversation_id: str) -> dict[str, Any]:
    """The trace of a conversation with no audit rows yet."""
    return {"conversationId": conversation_id, "steps": [], "stages": []}


def build_trace(conversation_id: str, events: Sequence[AuditEvent]) -> dict[str, Any]:
    """STEP_ENTER opens a step, STEP_EXIT / STEP_ERROR closes it; other stages attach to the open step.

    Shapes are ConvEngine's: a stage is ``{auditId, stage, createdAt, payload}`` (the stored payload,
    ``_meta`` included); a step's ``durationMs`` is whole milliseconds and its ``error`` the message text.
    """
    trace = empty_trace(conversation_id)
    trace["steps"], trace["stages"] = step_tree(events)
    return trace


def step_tree(events: Sequence[AuditEvent], *, skipped: bool = False, precise: bool = False
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The steps of ``events`` (each with the stages emitted while it ran) and every stage, in order.

    With ``skipped``, a step routed past is a step of its own (status ``SKIPPED``, ``skipped``: the
    reason) instead of a stage of the step around it; ConvEngine's trace shape has no such steps.
    With ``precise``, ``durationMs`` keeps the audit's fractions of a millisecond (the console's waterfall)."""
    steps: list[dict[str, Any]] = []
    stages: list[dict[str, Any]] = []
    open_steps: list[dict[str, Any]] = []
    for event in events:
        stage = {"auditId": event.audit_id, "stage": event.stage, "createdAt": event.created_at.isoformat(),
                 "payload": event.stored_payload()}
        stages.append(stage)
        if event.stage == audit_stages.STEP_ENTER:
            step: dict[str, Any] = {"step": event.payload.get("step"), "stepClass": event.payload.get("stepClass"),
                    "sourceFile": None, "status": "RUNNING", "startedAt": stage["createdAt"], "endedAt": None,
                    "durationMs": None, "error": None, "stages": []}
            steps.append(step)
            open_steps.append(step)
        elif event.stage in (audit_stages.STEP_EXIT, audit_stages.STEP_ERROR) and open_steps:
            _close(open_steps, event, stage, precise)
        elif skipped and event.stage == audit_stages.STEP_SKIPPED:
            steps.append({"step": event.payload.get("step"), "status": "SKIPPED", "skipped": event.payload.get("reason"),
                          "durationMs": None, "error": None, "stages": []})
        elif open_steps:
            open_steps[-1]["stages"].append(stage)
    return steps, stages


def _close(open_steps: list[dict[str, Any]], event: AuditEvent, stage: dict[str, Any], precise: bool) -> None:
    name = event.payload.get("step")
    index = next((i for i in range(len(open_steps) - 1, -1, -1) if open_steps[i]["step"] == name), len(open_steps) - 1)
    step = open_steps[index]
    del open_steps[index:]
    step["status"] = "ERROR" if event.stage == audit_stages.STEP_ERROR else "OK"
    step["endedAt"] = stage["createdAt"]
    step["durationMs"] = (_exact if precise else _millis)(event.payload.get("durationMs"))
    if event.stage == audit_stages.STEP_ERROR:
        message = event.payload.get("errorMessage")
        step["error"] = None if message is None else str(message)


def _exact(value: Any) -> float | None:
    """The audit's ``durationMs`` as recorded (3 decimals); anything unreadable is None."""
    millis = _millis(value)
    return None if millis is None else round(float(value), 3)


def _millis(value: Any) -> int | None:
    """ConvEngine's ``durationMs`` is a whole number (Long); anything unreadable is None."""
    if isinstance(value, bool):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None
