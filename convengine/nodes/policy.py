"""policy_enforcement (ce_policy, before any other LLM call; LLM policies use the POLICY call site) and
guardrail (sensitive actions)."""

from __future__ import annotations

import re
from typing import Any

from convengine._internal.textmatch import PatternError, RegexTimeoutError, cached_regex
from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.booleans import truthy
from convengine.catalog.vocab import LLM_POLICY
from convengine.config.records import PolicyRecord
from convengine.nodes.common import Step
from convengine.nodes.policy_check import check_policy, fail_closed
from convengine.nodes.turn import Turn

_WHITESPACE = re.compile(r"[\r\n\t]+| {2,}")


async def policy_enforcement(turn: Turn) -> None:
    """First matching enabled ce_policy (by priority) blocks the turn with its response_text.

    Text policies match the raw text; ``LLM`` policies ask the POLICY call site, which runs here,
    before any other LLM call of the turn.
    """
    policies = sorted((p for p in turn.snapshot.policies if p.enabled), key=lambda p: (p.priority, p.policy_id))
    for policy in policies:
        if policy.rule_type == LLM_POLICY:
            outcome = await _llm_outcome(turn, policy)
            hit, failed_closed = outcome is not None, outcome == "FAIL_CLOSED"
        else:
            hit, failed_closed = _text_hit(turn, policy), False
        if hit:
            _block(turn, policy, failed_closed=failed_closed)
            return


def _text_hit(turn: Turn, policy: PolicyRecord) -> bool:
    try:
        return policy.matcher is not None and policy.matcher.matches(turn.user_text)
    except RegexTimeoutError as exc:
        turn.audit(stages.POLICY_PATTERN_TIMEOUT, {"policyId": policy.policy_id, "error": exc.message})
        return False


async def _llm_outcome(turn: Turn, policy: PolicyRecord) -> str | None:
    """Returns "VIOLATION", "FAIL_CLOSED" (undecided and fail-closed) or None to allow; all audited."""
    verdict = await check_policy(turn, policy)
    if verdict.violates is not None:
        turn.audit(stages.POLICY_LLM_CHECK, {"policyId": policy.policy_id, "violates": verdict.violates,
                                        "reason": verdict.reason, "callSite": "POLICY"})
        return "VIOLATION" if verdict.violates else None
    closed = fail_closed(turn)
    turn.audit(stages.POLICY_LLM_UNDECIDED, {"policyId": policy.policy_id, "error": verdict.error, "failClosed": closed,
                                        "outcome": "BLOCK" if closed else "ALLOW", "callSite": "POLICY"})
    return "FAIL_CLOSED" if closed else None


def _block(turn: Turn, policy: PolicyRecord, *, failed_closed: bool = False) -> None:
    turn.set(keys.STATUS, "BLOCKED")
    turn.set(keys.PAYLOAD, {"type": "TEXT", "value": policy.response_text})
    payload: dict[str, Any] = {"policyId": policy.policy_id, "ruleType": policy.rule_type, "pattern": policy.pattern}
    if failed_closed:
        payload["failedClosed"] = True
    turn.audit(stages.POLICY_BLOCK, payload)
    turn.route_to(names.PERSIST_CONVERSATION)


async def guardrail(turn: Turn) -> None:
    """Sanitise, look for sensitive patterns, require approval when configured."""
    cfg = turn.settings.flow.guardrail
    params = turn.params
    text = turn.user_text
    if cfg.sanitize_input:
        text = _WHITESPACE.sub(" ", text).strip()
        params[pk.SANITIZED_USER_TEXT] = text
    sensitive, undecided = _sensitive(text, cfg.sensitive_patterns, turn.settings.regex_timeout_ms / 1000)
    granted = _approval_granted(turn)
    required = cfg.require_approval_for_sensitive_actions
    deny = required and not granted and (sensitive or (undecided and cfg.approval_gate_fail_closed))
    if deny:
        _deny(turn, sensitive=sensitive, granted=granted, undecided=undecided)
        return
    params[pk.GUARDRAIL_BLOCKED] = False
    turn.audit(stages.GUARDRAIL_ALLOW, {"result": "ALLOW", "sensitive": sensitive, "approvalRequired": required,
                                   "approvalGranted": granted})


def _deny(turn: Turn, *, sensitive: bool, granted: bool, undecided: bool) -> None:
    params = turn.params
    reason = "SENSITIVE_ACTION_APPROVAL_REQUIRED" if sensitive else "SENSITIVE_CHECK_FAILED_CLOSED"
    params.update({"guardrail_blocked": True, "guardrail_reason": reason, "policy_decision": "RECLASSIFY_INTENT",
                   "skip_tool_execution": True, "skip_pending_action_execution": True})
    turn.audit(stages.GUARDRAIL_DENY, {"result": "DENY", "reason": reason, "sensitive": sensitive, "approvalGranted": granted,
                                  "undecided": undecided, "userText": turn.user_text})


def _sensitive(text: str, patterns: list[str], timeout_s: float) -> tuple[bool, bool]:
    """(matched, undecided): undecided when a pattern could not be evaluated in time."""
    undecided = False
    for pattern in patterns:
        try:
            if cached_regex(pattern, timeout_s).search(text):
                return True, False
        except (RegexTimeoutError, PatternError):
            undecided = True
    return False, undecided


def _approval_granted(turn: Turn) -> bool:
    params = turn.read_params()
    for key in ("approval_granted", "approvalGranted"):
        if key in params:
            return truthy(params[key])
    approval: Any = turn.read_context().get("approval")
    return isinstance(approval, dict) and truthy(approval.get("granted"))


def _guardrail_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if turn.settings.flow.guardrail.enabled:
        return None
    return stages.GUARDRAIL_ALLOW, {"result": "ALLOW", "skipped": True, "reason": "GUARDRAIL_DISABLED"}


def _policy_skip(turn: Turn) -> tuple[None, dict[str, Any]] | None:
    if any(p.enabled for p in turn.snapshot.policies):
        return None
    return None, {"reason": "NO_POLICIES"}


STEPS = (
    Step(names.POLICY_ENFORCEMENT, policy_enforcement, skip=_policy_skip, routes=(names.PERSIST_CONVERSATION,)),
    Step(names.GUARDRAIL, guardrail, skip=_guardrail_skip),
)
