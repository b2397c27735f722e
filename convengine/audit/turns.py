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


LLM_STAGES = (stages.LLM_CALL, stages.LLM_CALL_ERROR)
TOOL_CALL_STAGES = (stages.MCP_TOOL_CALL, stages.TOOL_ORCHESTRATION_REQUEST)
TOOL_RESULT_STAGES = (stages.MCP_TOOL_RESULT, stages.MCP_TOOL_ERROR, stages.TOOL_ORCHESTRATION_RESULT, stages.TOOL_ORCHESTRATION_ERROR)


def completed(events: Sequence[AuditEvent]) -> bool:
    """Whether the turn returned a result (a failed turn is rolled back and leaves no step row)."""
    return any(event.stage == stages.ENGINE_RETURN for event in events)


def undone_marks(turns: Sequence[Sequence[AuditEvent]], steps: Sequence[dict[str, Any]]) -> list[bool]:
    """Per turn, whether undo took it back: completed turns match the conversation's step rows in order."""
    rows = iter([bool(step.get("undone")) for step in steps])
    return [next(rows, False) if completed(events) else False for events in turns]


def logged_llm_call(event: AuditEvent) -> bool:
    """Whether an LLM audit event has a ``ce_llm_call_log`` row (a reply that failed validation
    after the call succeeded is audited twice but logged once)."""
    return event.stage in LLM_STAGES and "latencyMs" in event.payload


def tool_calls(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """Tool calls with their arguments, each followed by its result or error."""
    calls: list[dict[str, Any]] = []
    for event in events:
        p = event.payload
        if event.stage in TOOL_CALL_STAGES and p.get("tool_code"):
            calls.append({"tool": p["tool_code"], "args": p.get("args") or {}, "result": None, "error": None})
        elif event.stage in TOOL_RESULT_STAGES:
            code = p.get("tool_code")
            target = next((c for c in reversed(calls) if c["tool"] == code and c["result"] is None
                           and c["error"] is None), None)
            if target is None:
                target = {"tool": code, "args": p.get("args") or {}, "result": None, "error": None}
                calls.append(target)
            if event.stage.endswith("ERROR"):
                target["error"] = p.get("error") or "error"
            else:
                target["result"] = p.get("result")
    return calls


def _opens_turn(event: AuditEvent, current: str | None) -> bool:
    if event.turn_id is not None:
        return event.turn_id != current
    return event.stage == stages.STEP_ENTER and event.payload.get("step") == LOAD_OR_CREATE_CONVERSATION
