"""A conversation's audit events cut into turns, and one turn as the console shows it.

A turn starts at the ``STEP_ENTER`` of ``load_or_create_conversation``. Its view holds the step
tree (durations, skipped steps with their reason, the stages each step emitted), the rule matches
and actions, the LLM calls (matched in order with ``ce_llm_call_log`` rows when calls are logged),
the tool calls with their arguments and results, and the intent/state before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.audit.events import AuditEvent

TURN_START = "load_or_create_conversation"
LLM_STAGES = ("LLM_CALL", "LLM_CALL_ERROR")
TOOL_CALL_STAGES = ("MCP_TOOL_CALL", "TOOL_ORCHESTRATION_REQUEST")
TOOL_RESULT_STAGES = ("MCP_TOOL_RESULT", "MCP_TOOL_ERROR", "TOOL_ORCHESTRATION_RESULT", "TOOL_ORCHESTRATION_ERROR")


def split_turns(events: Sequence[AuditEvent]) -> list[list[AuditEvent]]:
    """The events of each turn, oldest turn first (events before the first turn start are dropped)."""
    turns: list[list[AuditEvent]] = []
    for event in events:
        if event.stage == "STEP_ENTER" and event.payload.get("step") == TURN_START:
            turns.append([])
        if turns:
            turns[-1].append(event)
    return turns


def completed(events: Sequence[AuditEvent]) -> bool:
    """Whether the turn returned a result (a failed turn is rolled back and leaves no step row)."""
    return any(event.stage == "ENGINE_RETURN" for event in events)


def undone_marks(turns: Sequence[Sequence[AuditEvent]], steps: Sequence[dict[str, Any]]) -> list[bool]:
    """Per turn, whether undo took it back: completed turns match the conversation's step rows in order."""
    rows = iter([bool(step.get("undone")) for step in steps])
    return [next(rows, False) if completed(events) else False for events in turns]


def logged_llm_call(event: AuditEvent) -> bool:
    """Whether an LLM audit event has a ``ce_llm_call_log`` row (a reply that failed validation
    after the call succeeded is audited twice but logged once)."""
    return event.stage in LLM_STAGES and "latencyMs" in event.payload


def summary(index: int, events: Sequence[AuditEvent]) -> dict[str, Any]:
    """One line of a conversation's turn list: input, reply, intent/state, time."""
    first = events[0]
    meta = first.stored_payload().get("_meta") or {}
    result = _last(events, "ENGINE_RETURN")
    user = _last(events, "USER_INPUT")
    timing = _last(events, "PIPELINE_TIMING")
    error = _last(events, "STEP_ERROR")
    return {
        "turn": index, "startedAt": first.created_at.isoformat(),
        "user": user.get("text") if user else None,
        "reply": (result.get("payload") or {}).get("value") if result else None,
        "before": {"intent": meta.get("intent"), "state": meta.get("state")},
        "after": {"intent": result.get("intent"), "state": result.get("state"),
                  "status": result.get("status")} if result else None,
        "totalMs": timing.get("totalMs") if timing else None,
        "error": error.get("errorMessage") if error else None,
    }


def view(index: int, events: Sequence[AuditEvent], llm_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Everything the turn view shows; ``llm_rows`` are this turn's ``ce_llm_call_log`` rows in order."""
    return {**summary(index, events), "steps": step_tree(events), "rules": rules(events),
            "llmCalls": llm_calls(events, llm_rows), "toolCalls": tool_calls(events),
            "events": len(events)}


def step_tree(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """The turn's steps in order: entered steps with their stages and duration, skipped ones with their reason."""
    steps: list[dict[str, Any]] = []
    open_steps: list[dict[str, Any]] = []
    for event in events:
        payload = event.payload
        if event.stage == "STEP_ENTER":
            step = {"step": payload.get("step"), "stepClass": payload.get("stepClass"), "status": "RUNNING",
                    "durationMs": None, "skipped": None, "error": None, "stages": []}
            steps.append(step)
            open_steps.append(step)
        elif event.stage in ("STEP_EXIT", "STEP_ERROR") and open_steps:
            step = _close(open_steps, payload.get("step"))
            step["status"] = "ERROR" if event.stage == "STEP_ERROR" else "OK"
            step["durationMs"] = payload.get("durationMs")
            step["outcome"] = payload.get("outcome")
            if event.stage == "STEP_ERROR":
                step["error"] = payload.get("errorMessage")
        elif event.stage == "STEP_SKIPPED":
            steps.append({"step": payload.get("step"), "status": "SKIPPED", "skipped": payload.get("reason"),
                          "durationMs": None, "stages": []})
        elif open_steps:
            open_steps[-1]["stages"].append(_stage(event))
        elif steps:
            steps[-1]["stages"].append(_stage(event))
    return steps


def _close(open_steps: list[dict[str, Any]], name: Any) -> dict[str, Any]:
    index = next((i for i in range(len(open_steps) - 1, -1, -1) if open_steps[i]["step"] == name),
                 len(open_steps) - 1)
    step = open_steps[index]
    del open_steps[index:]
    return step


def _stage(event: AuditEvent) -> dict[str, Any]:
    return {"auditId": event.audit_id, "stage": event.stage, "createdAt": event.created_at.isoformat(),
            "payload": event.payload}


def rules(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """Rule matches and the actions they applied, in order."""
    found = []
    for event in events:
        kind = event.stage.split(" ", 1)[0]
        if kind in ("RULE_MATCH", "RULE_APPLIED"):
            p = event.payload
            found.append({"kind": kind, "where": event.stage.partition(" ")[2].strip("()"), "ruleId": p.get("ruleId"),
                          "phase": p.get("phase"), "ruleType": p.get("ruleType"), "pattern": p.get("matchPattern"),
                          "action": p.get("action"), "actionValue": p.get("actionValue")})
    return found


def llm_calls(events: Sequence[AuditEvent], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn's LLM calls: call site, latency, tokens and step from the audit; prompt and reply from the log."""
    calls = []
    logged = iter(rows)
    step = None
    for event in events:
        if event.stage == "STEP_ENTER":
            step = event.payload.get("step")
        if event.stage not in LLM_STAGES:
            continue
        p = event.payload
        row = next(logged, None) if logged_llm_call(event) else None
        calls.append({"callSite": p.get("callSite"), "step": step, "ok": event.stage == "LLM_CALL",
                      "latencyMs": p.get("latencyMs"), "usage": p.get("usage") or {}, "model": p.get("model"),
                      "attempt": p.get("attempt"), "error": p.get("error"),
                      "prompt": row.get("prompt_text") if row else None,
                      "reply": row.get("response_text") if row else None, "logged": row is not None})
    return calls


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


def _last(events: Sequence[AuditEvent], stage: str) -> dict[str, Any] | None:
    for event in reversed(events):
        if event.stage == stage:
            return event.payload
    return None
