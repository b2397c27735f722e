"""An audit trail grouped into turns, and a turn into its steps: the one grouping the trace, the CLI,
the conversation test runner and the tests use.

Every event a turn emits carries the turn's id (``AuditEvent.turn_id``, stored as ``_meta.turnId``).
Events outside a turn (undo, redo, feedback) belong to the turn before them. Rows stored without
``_meta`` (``audit.persist-meta: false``, or written before turn ids existed) fall back to the turn's
first step: a turn starts where ``load_or_create_conversation`` is entered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.audit.events import AuditEvent
from convengine.audit.trace import step_tree
from convengine.catalog import stages
from convengine.catalog.names import LOAD_OR_CREATE_CONVERSATION


def split_turns(events: Sequence[AuditEvent]) -> list[list[AuditEvent]]:
    """``events`` grouped per turn, oldest first (events before the first turn are left out)."""
    turns: list[list[AuditEvent]] = []
    current: str | None = None
    for event in events:
        if _opens_turn(event, current):
            turns.append([])
            current = event.turn_id
        if turns:
            turns[-1].append(event)
    return turns


def last_turn(events: Sequence[AuditEvent]) -> list[AuditEvent]:
    """The events of the newest turn ([] when there is none)."""
    turns = split_turns(events)
    return turns[-1] if turns else []


def turn_steps(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """The steps of ``events`` (a turn's), each ``{step, status, durationMs, stages...}`` as in the trace."""
    return step_tree(events)[0]


def script_output(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """What the python nodes of ``events`` (a turn's) printed, in order: ``{flow, node, stdout, error}``
    (``error`` None when the script succeeded); scripts that printed nothing and succeeded are left out."""
    found = []
    for event in events:
        if event.stage not in (stages.FLOW_SCRIPT_RAN, stages.FLOW_SCRIPT_FAILED):
            continue
        p = event.payload
        if p.get("stdout") or event.stage == stages.FLOW_SCRIPT_FAILED:
            found.append({"flow": p.get("flow"), "node": p.get("node"), "stdout": str(p.get("stdout") or ""),
                          "error": p.get("error") if event.stage == stages.FLOW_SCRIPT_FAILED else None})
    return found


def _opens_turn(event: AuditEvent, current: str | None) -> bool:
    if event.turn_id is not None:
        return event.turn_id != current
    return event.stage == stages.STEP_ENTER and event.payload.get("step") == LOAD_OR_CREATE_CONVERSATION
