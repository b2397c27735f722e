"""Pending actions: action_lifecycle (runtime + expiry), disambiguation, pending_action (execution).

The runtime lives in ``context.pending_action_runtime`` (OPEN, IN_PROGRESS, EXECUTED,
REJECTED, EXPIRED). Unlike ConvEngine, expiry really expires: a confirmation whose TTL ran out
stays EXPIRED (the turn that notices it reports ``pending_action_result=EXPIRED``) until the user
answers; that answer is refused (reported EXPIRED too) and the action is presented again, so only a
confirmation given after that runs it. TTL counts turns with the conversation's turn counter, from
the turn the confirmation was presented.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.config.records import PendingActionRecord
from convengine.nodes.common import Step, dig, now_ms, resolved
from convengine.nodes.disambiguation import disambiguation_question
from convengine.nodes.turn import Turn
from convengine.registry import TaskContext, call_task
from convengine.rules.scope import in_scope

TERMINAL = ("EXECUTED", "REJECTED", "EXPIRED")
DISAMBIGUATION_REASON = "PENDING_ACTION_DISAMBIGUATION"
DEFAULT_QUESTION = "I found multiple actions. Which one should I execute: {{options}}?"


def eligible(turn: Turn) -> list[PendingActionRecord]:
    if not (resolved(turn.intent) and resolved(turn.state)):
        return []
    rows = [a for a in turn.snapshot.pending_actions
            if a.enabled and in_scope(a.intent_code, a.state_code, turn.intent, turn.state)]
    return sorted(rows, key=lambda a: (a.priority, a.pending_action_id))


def requested_key(turn: Turn) -> str | None:
    params, ctx = turn.read_params(), turn.read_context()
    for value in (params.get(pk.PENDING_ACTION_KEY), ctx.get("pending_action_key"), ctx.get("pendingActionKey"),
                  dig(ctx, "pending_action", "action_key")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def catalogue_action(turn: Turn, key: str | None) -> PendingActionRecord | None:
    """With a key, the best row for it; without, the top row unless the top two tie."""
    rows = eligible(turn)
    if key:
        return next((a for a in rows if a.action_key.casefold() == key.casefold()), None)
    if len(rows) >= 2 and rows[0].priority == rows[1].priority:
        return None
    return rows[0] if rows else None


def _open(runtime: dict[str, Any], action: PendingActionRecord, turn_no: int, at_ms: int, turn: Turn) -> None:
    cfg = turn.settings.flow.action_lifecycle
    runtime.clear()
    runtime.update({
        "action_key": action.action_key, "action_ref": action.action_ref, "status": "OPEN",
        "created_turn": turn_no, "created_at_epoch_ms": at_ms,
        "expires_turn": turn_no + cfg.ttl_turns if cfg.ttl_turns > 0 else -1,
        "expires_at_epoch_ms": at_ms + cfg.ttl_minutes * 60_000 if cfg.ttl_minutes > 0 else -1,
    })


def _expired(runtime: dict[str, Any], turn_no: int, at_ms: int) -> bool:
    expires_turn = runtime.get("expires_turn", -1)
    expires_at = runtime.get("expires_at_epoch_ms", -1)
    return (expires_turn >= 0 and turn_no > expires_turn) or (expires_at >= 0 and at_ms >= expires_at)


def _presented_at(turn: Turn, default_ms: int) -> int:
    """When the previous turn ended (the confirmation was shown then), else now."""
    recent = turn.get(keys.RECENT_TURNS) or []
    if recent and isinstance(recent[-1], dict) and recent[-1].get("at"):
        return int(recent[-1]["at"])
    return default_ms


async def action_lifecycle(turn: Turn) -> None:
    turn_no, at = int(turn.get(keys.TURN) or 1), now_ms(turn)
    runtime = dict(turn.read_context().get("pending_action_runtime") or {})
    events: list[dict[str, Any]] = []
    noticed = runtime.get("status") in ("OPEN", "IN_PROGRESS") and _expired(runtime, turn_no, at)
    if noticed:
        runtime.update(status="EXPIRED", expired_turn=turn_no, expired_at_epoch_ms=at)
        events.append({"event": "EXPIRED", "status": "EXPIRED", "turn": turn_no, "actionKey": runtime.get("action_key")})
    action = catalogue_action(turn, requested_key(turn))
    answered = turn.read_params().get(pk.POLICY_DECISION) in ("EXECUTE_PENDING_ACTION", "REJECT_PENDING_ACTION")
    blocked = False
    if action is None:
        runtime = {} if runtime.get("status") not in ("OPEN", "IN_PROGRESS") else runtime
    elif runtime.get("status") == "EXPIRED" and runtime.get("action_ref") == action.action_ref:
        blocked = answered  # an expired confirmation stays expired until the user answers it
        if blocked:  # the answer is refused and the action presented again: only a later "yes" runs it
            _open(runtime, action, turn_no, at, turn)
            events.append({"event": "REOPENED_AFTER_EXPIRY", "status": "OPEN", "turn": turn_no,
                           "actionKey": action.action_key, "actionRef": action.action_ref})
    elif not runtime or runtime.get("action_ref") != action.action_ref or runtime.get("status") in TERMINAL:
        _open(runtime, action, max(turn_no - 1, 1), _presented_at(turn, at), turn)
        events.append({"event": "OPEN", "status": "OPEN", "turn": turn_no, "actionKey": action.action_key,
                       "actionRef": action.action_ref})
    _report(turn, runtime, expired_now=noticed or blocked)
    if not blocked:
        _advance(turn, runtime, turn_no, at, events)
    turn.context["pending_action_runtime"] = runtime
    for event in events:
        turn.audit(stages.PENDING_ACTION_LIFECYCLE, event)


def _report(turn: Turn, runtime: dict[str, Any], *, expired_now: bool) -> None:
    """The runtime status param; on the turn expiry is noticed and on the answer it blocks, the turn's
    ``pending_action_result`` is EXPIRED so a rule or response can tell the user."""
    turn.params[pk.PENDING_ACTION_RUNTIME_STATUS] = "EXPIRED" if expired_now else runtime.get("status")
    if expired_now:
        turn.params[pk.PENDING_ACTION_RESULT] = "EXPIRED"


def _advance(turn: Turn, runtime: dict[str, Any], turn_no: int, at: int, events: list[dict[str, Any]]) -> None:
    decision = turn.read_params().get(pk.POLICY_DECISION)
    if runtime.get("status") != "OPEN":
        return
    if decision == "EXECUTE_PENDING_ACTION":
        runtime.update(status="IN_PROGRESS", in_progress_turn=turn_no, in_progress_at_epoch_ms=at)
        events.append({"event": "IN_PROGRESS", "status": "IN_PROGRESS", "turn": turn_no,
                       "actionKey": runtime.get("action_key")})
    elif decision == "REJECT_PENDING_ACTION":
        runtime.update(status="REJECTED", rejected_turn=turn_no, rejected_at_epoch_ms=at)
        events.append({"event": "REJECTED", "status": "REJECTED", "turn": turn_no,
                       "actionKey": runtime.get("action_key")})


def _lifecycle_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if not turn.settings.flow.action_lifecycle.enabled:
        return stages.PENDING_ACTION_LIFECYCLE, {"event": "SKIPPED", "reason": "ACTION_LIFECYCLE_DISABLED"}
    if turn.snapshot.pending_actions or turn.read_context().get("pending_action_runtime"):
        return None
    return stages.PENDING_ACTION_LIFECYCLE, {"event": "SKIPPED", "reason": "NO_PENDING_ACTIONS"}


# --- disambiguation --------------------------------------------------------------------


async def disambiguation(turn: Turn) -> None:
    if _resolve_choice(turn):
        return
    params = turn.read_params()
    if params.get(pk.POLICY_DECISION) != "EXECUTE_PENDING_ACTION" or params.get(pk.PENDING_ACTION_KEY):
        return
    rows = eligible(turn)
    tied = [a for a in rows if rows and a.priority == rows[0].priority]
    if len(tied) < 2:
        return
    await _ask(turn, tied[: turn.settings.flow.disambiguation.max_options], len(tied))


def option_label(action: PendingActionRecord) -> str:
    return f"{action.action_key} ({action.description})" if action.description else action.action_key


async def _ask(turn: Turn, options: Sequence[PendingActionRecord], count: int) -> None:
    labels = [option_label(a) for a in options]
    question, source = await disambiguation_question(turn, options, labels, count)
    turn.context["pending_clarification"] = {
        "question": question, "reason": DISAMBIGUATION_REASON,
        "options": [{"action_key": a.action_key, "description": a.description} for a in options]}
    turn.params.update(policy_decision="RECLASSIFY_INTENT", pending_action_disambiguation_required=True)
    turn.audit(stages.DISAMBIGUATION_REQUIRED, {"reason": "MULTIPLE_PENDING_ACTIONS", "question": question,
                                          "candidateCount": count, "options": labels, "questionSource": source})


def _resolve_choice(turn: Turn) -> bool:
    """A reply naming one option of a pending disambiguation picks that action."""
    pending = turn.read_context().get("pending_clarification") or {}
    if not isinstance(pending, dict) or pending.get("reason") != DISAMBIGUATION_REASON:
        return False
    key = turn.read_params().get(pk.PENDING_ACTION_KEY) or _named_option(turn.user_text, pending.get("options") or [])
    if not key:
        return False
    turn.context.pop("pending_clarification", None)
    turn.params.update(pending_action_key=key, policy_decision="EXECUTE_PENDING_ACTION", skip_intent_resolution=True)
    turn.audit(stages.DISAMBIGUATION_RESOLVED, {"actionKey": key, "reply": turn.user_text})
    return True


def _named_option(text: str, options: Sequence[dict[str, Any]]) -> str | None:
    folded = text.casefold()
    hits = [o["action_key"] for o in options
            if o.get("action_key", "").casefold() in folded
            or (o.get("description") and o["description"].casefold() in folded)]
    return hits[0] if len(hits) == 1 else None


def _disambiguation_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if not turn.settings.flow.disambiguation.enabled:
        return stages.DISAMBIGUATION_SKIPPED, {"reason": "DISAMBIGUATION_DISABLED"}
    pending = turn.read_context().get("pending_clarification") or {}
    waiting = isinstance(pending, dict) and pending.get("reason") == DISAMBIGUATION_REASON
    if waiting or turn.read_params().get(pk.POLICY_DECISION) == "EXECUTE_PENDING_ACTION":
        return None
    return stages.DISAMBIGUATION_SKIPPED, {"reason": "NOT_EXECUTING_PENDING_ACTION"}


# --- execution -------------------------------------------------------------------------


def action_ref(turn: Turn) -> str | None:
    action = catalogue_action(turn, requested_key(turn))
    if action is not None:
        return action.action_ref
    pending: Any = turn.read_context().get("pending_action") or turn.read_context().get("pendingAction")
    if isinstance(pending, str):
        return pending.strip() or None
    if isinstance(pending, dict):
        for k in ("task", "action", "action_value", "actionValue", "set_task", "setTask"):
            if pending.get(k):
                return str(pending[k])
        bean = pending.get("bean") or pending.get("bean_name") or pending.get("beanName")
        method = (pending.get("method") or pending.get("method_name") or pending.get("methodName")
                  or pending.get("methods") or pending.get("method_names"))
        if bean:
            return f"{bean}:{method or bean}"
    return None


async def pending_action(turn: Turn) -> None:
    params = turn.read_params()
    decision = params.get(pk.POLICY_DECISION)
    if params.get(pk.SKIP_PENDING_ACTION_EXECUTION) or params.get(pk.GUARDRAIL_BLOCKED):
        turn.audit(stages.PENDING_ACTION_SKIPPED, {"reason": "pending action skipped by guardrail"})
        return
    if params.get(pk.PENDING_ACTION_RUNTIME_STATUS) == "EXPIRED":
        turn.params[pk.PENDING_ACTION_RESULT] = "EXPIRED"
        turn.audit(stages.PENDING_ACTION_SKIPPED, {"reason": "EXPIRED", "policyDecision": decision,
                                             "message": "the confirmation expired; it must be confirmed again"})
        return
    ref = action_ref(turn)
    if ref is None:
        turn.audit(stages.PENDING_ACTION_SKIPPED, {"reason": "NO_PENDING_ACTION", "policyDecision": decision})
        return
    if decision == "REJECT_PENDING_ACTION":
        _finish(turn, "REJECTED", ref, stages.PENDING_ACTION_REJECTED, {})
        return
    await _execute(turn, ref)


async def _execute(turn: Turn, ref: str) -> None:
    bean, _, methods = ref.partition(":")
    names_ = [m.strip() for m in (methods or bean).split(",") if m.strip()]
    if not bean.strip() or not names_:
        _finish(turn, "FAILED", ref, stages.PENDING_ACTION_FAILED, {"error": "invalid pending action reference"})
        return
    try:
        for method in names_:
            fn = turn.ctx.services.registries.tasks.resolve(bean.strip(), method)
            await call_task(fn, TaskContext(turn))
    except Exception as exc:  # noqa: BLE001 - a failing task is a FAILED result, audited
        _finish(turn, "FAILED", ref, stages.PENDING_ACTION_FAILED,
                {"taskBean": bean, "taskMethods": names_, "errorType": type(exc).__name__, "error": str(exc)})
        return
    _finish(turn, "EXECUTED", ref, stages.PENDING_ACTION_EXECUTED, {"taskBean": bean, "taskMethods": names_})


def _finish(turn: Turn, result: str, ref: str, stage: str, extra: dict[str, Any]) -> None:
    turn.params[pk.PENDING_ACTION_RESULT] = result
    runtime = turn.context.setdefault("pending_action_runtime", {})
    if result in ("EXECUTED", "REJECTED") and runtime.get("action_ref") in (None, ref):
        runtime.update(status=result, action_ref=ref)
        runtime[f"{result.lower()}_turn"] = turn.get(keys.TURN)
    turn.audit(stage, {"policyDecision": turn.read_params().get(pk.POLICY_DECISION), "pendingActionRef": ref,
                       "pendingActionResult": result, "intent": turn.intent, "state": turn.state, **extra})


def _pending_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    params = turn.read_params()
    if params.get(pk.SKIP_PENDING_ACTION_EXECUTION) or params.get(pk.GUARDRAIL_BLOCKED):
        return stages.PENDING_ACTION_SKIPPED, {"reason": "pending action skipped by guardrail"}
    decision = params.get(pk.POLICY_DECISION)
    if decision in ("EXECUTE_PENDING_ACTION", "REJECT_PENDING_ACTION"):
        return None
    return stages.PENDING_ACTION_SKIPPED, {"reason": "NO_PENDING_ACTION_DECISION", "policyDecision": decision}


STEPS = (
    Step(names.ACTION_LIFECYCLE, action_lifecycle, skip=_lifecycle_skip),
    Step(names.DISAMBIGUATION, disambiguation, skip=_disambiguation_skip),
    Step(names.PENDING_ACTION, pending_action, skip=_pending_skip),
)
