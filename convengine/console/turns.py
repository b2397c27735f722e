"""One turn as the console shows it (turns are cut by :mod:`convengine.audit.turns`).

A turn's view holds the step
tree (durations, skipped steps with their reason, the stages each step emitted), the rule matches
and actions, the LLM calls (matched in order with ``ce_llm_call_log`` rows when calls are logged),
the tool calls with their arguments and results, what python nodes printed, the intent/state before and after, the caller's
input params and what the turn changed in the context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.audit import trace
from convengine.audit.events import AuditEvent
from convengine.audit.turns import (
    LLM_STAGES,
    completed,
    logged_llm_call,
    script_output,
    split_turns,
    tool_calls,
    undone_marks,
)
from convengine.catalog import stages
from convengine.catalog.names import JAVA_STEP_CLASSES

__all__ = ["completed", "logged_llm_call", "split_turns", "step_tree", "summary", "tool_calls", "undone_marks", "view",
           "waterfall"]

def summary(index: int, events: Sequence[AuditEvent]) -> dict[str, Any]:
    """One line of a conversation's turn list: input, reply, intent/state, time."""
    first = events[0]
    meta = first.stored_payload().get("_meta") or {}
    result = _last(events, stages.ENGINE_RETURN)
    user = _last(events, stages.USER_INPUT)
    timing = _last(events, stages.PIPELINE_TIMING)
    error = _last(events, stages.STEP_ERROR)
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
    result = _last(events, stages.ENGINE_RETURN)
    user = _last(events, stages.USER_INPUT)
    return {**summary(index, events), "inputParams": user.get("inputParams") if user else None,
            "contextChanges": result.get("contextChanges") if result else None,
            "steps": (steps := step_tree(events)), "waterfall": waterfall(steps, _last(events, stages.PIPELINE_TIMING)),
            "rules": rules(events),
            "llmCalls": llm_calls(events, llm_rows), "toolCalls": tool_calls(events),
            "scriptOutput": script_output(events),
            "events": len(events)}


def step_tree(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """The turn's steps in order: entered steps with their stages and duration, skipped ones with their reason."""
    steps = trace.step_tree(events, skipped=True, precise=True)[0]
    for step in steps:
        step["stepClass"] = step.get("stepClass") or JAVA_STEP_CLASSES.get(step["step"])
    return steps


def waterfall(steps: Sequence[dict[str, Any]], timing: dict[str, Any] | None) -> dict[str, Any]:
    """Where the turn's time went: each step that ran as a bar (start and length in milliseconds, one
    after the other as they ran) and the turn's time outside every step as ``engineMs``, so the bars
    add up to ``totalMs`` (the turn's PIPELINE_TIMING)."""
    bars, at = [], 0.0
    for step in steps:
        if step["status"] == "SKIPPED" or step["durationMs"] is None:
            continue
        bars.append({"step": step["step"], "stepClass": step["stepClass"], "startMs": round(at, 3),
                     "durationMs": step["durationMs"], "status": step["status"]})
        at += step["durationMs"]
    total = timing.get("totalMs") if timing else None
    total = float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None
    engine = round(max(total - at, 0.0), 3) if total is not None else None
    return {"totalMs": total, "stepsMs": round(at, 3), "engineMs": engine, "bars": bars}


def _stage(event: AuditEvent) -> dict[str, Any]:
    return {"auditId": event.audit_id, "stage": event.stage, "createdAt": event.created_at.isoformat(),
            "payload": event.payload}


def rules(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """Rule matches and the actions they applied, in order."""
    found = []
    for event in events:
        kind = event.stage.split(" ", 1)[0]
        if kind in (stages.RULE_MATCH, stages.RULE_APPLIED):
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
        if event.stage == stages.STEP_ENTER:
            step = event.payload.get("step")
        if event.stage not in LLM_STAGES:
            continue
        p = event.payload
        row = next(logged, None) if logged_llm_call(event) else None
        calls.append({"callSite": p.get("callSite"), "step": step, "ok": event.stage == stages.LLM_CALL,
                      "latencyMs": p.get("latencyMs"), "usage": p.get("usage") or {}, "model": p.get("model"),
                      "attempt": p.get("attempt"), "error": p.get("error"),
                      "prompt": row.get("prompt_text") if row else None,
                      "reply": row.get("response_text") if row else None, "logged": row is not None})
    return calls


def _last(events: Sequence[AuditEvent], stage: str) -> dict[str, Any] | None:
    for event in reversed(events):
        if event.stage == stage:
            return event.payload
    return None
