"""rules (PRE_RESPONSE_RESOLUTION), state_graph (allowed transitions from ce_state_graph) and
post_response_rules (POST_RESPONSE_RESOLUTION, after the response is resolved).

POST_RESPONSE_RESOLUTION rules see the resolved payload (``@.payload``) and may change intent, state,
input params and context like any rule; those changes are returned and persisted with the turn, but
the payload is not resolved again (ConvEngine's PostResponseRulesStep). A SET_STATE there is checked
against the state graph like one in PRE_RESPONSE_RESOLUTION; HARD_BLOCK keeps the state the response
was resolved for.
"""

from __future__ import annotations

from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.vocab import ANY, POST_RESPONSE_RESOLUTION, PRE_RESPONSE_RESOLUTION, UNKNOWN
from convengine.nodes.common import Step, run_rules
from convengine.nodes.turn import Turn


async def rules(turn: Turn) -> None:
    await run_rules(turn, PRE_RESPONSE_RESOLUTION, "RulesStep")


def allowed_edges(turn: Turn, intent: str) -> set[tuple[str, str]] | None:
    """Edges for ``intent`` (its rows, ANY rows and the YAML map); None when there are none."""
    edges = {(g.from_state, g.to_state) for g in turn.snapshot.state_graph
             if g.enabled and g.intent_code in (intent, ANY)}
    for source, targets in turn.settings.flow.state_graph.allowed_transitions.items():
        edges.update((source.strip().upper(), t.strip().upper()) for t in targets)
    return edges or None


def _checks(turn: Turn) -> list[dict[str, Any]]:
    start = turn.get(keys.TURN_START) or {}
    start_state = start.get("state") if start.get("intent") == turn.intent else UNKNOWN
    checks = []
    if start_state and start_state != turn.state:
        checks.append({"fromState": start_state, "toState": turn.state, "intent": turn.intent, "cause": "TURN"})
    for t in turn.get(keys.TRANSITIONS) or []:
        if str(t.get("cause", "")).startswith("rule"):
            checks.append({"fromState": t["from"], "toState": t["to"], "intent": t["intent"], "cause": t["cause"]})
    return checks


def _mode(turn: Turn) -> str:
    cfg = turn.settings.flow.state_graph
    return "SOFT_BLOCK" if cfg.mode == "AUDIT_ONLY" and cfg.soft_block_on_violation else cfg.mode


async def state_graph(turn: Turn) -> None:
    checks = _checks(turn)
    violations = _violations(turn, checks)
    if not violations:
        turn.params[pk.STATE_GRAPH_VALID] = True
        turn.audit(stages.STATE_GRAPH_VALID, {"checked": checks, "intent": turn.intent, "state": turn.state})
        return
    _violated(turn, violations)


def _violations(turn: Turn, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for check in checks:
        edges = allowed_edges(turn, check["intent"])
        if edges is not None and (check["fromState"], check["toState"]) not in edges:
            found.append(check)
    return found


def _violated(turn: Turn, violations: list[dict[str, Any]], keep: dict[str, Any] | None = None) -> None:
    mode = _mode(turn)
    params = turn.params
    params[pk.STATE_GRAPH_VALID] = False
    params[pk.STATE_GRAPH_SOFT_BLOCK] = mode == "SOFT_BLOCK"
    for v in violations:
        turn.audit(stages.STATE_GRAPH_VIOLATION, {**v, "allowed": False, "mode": mode,
                                             "validateOnly": mode != "HARD_BLOCK", "softBlock": mode == "SOFT_BLOCK"})
    if mode == "HARD_BLOCK":
        start = keep or turn.get(keys.TURN_START) or {}
        blocked_state = turn.state
        turn.set(keys.INTENT, start.get("intent") or UNKNOWN)
        turn.set(keys.STATE, start.get("state") or UNKNOWN)
        params[pk.STATE_GRAPH_BLOCKED] = True
        turn.audit(stages.STATE_GRAPH_BLOCKED, {"blockedState": blocked_state, "keptIntent": turn.intent,
                                          "keptState": turn.state})


def _state_graph_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if not turn.settings.flow.state_graph.enabled:
        return stages.STATE_GRAPH_SKIPPED, {"reason": "STATE_GRAPH_DISABLED"}
    start = turn.get(keys.TURN_START) or {}
    if start.get("state") == turn.state and start.get("intent") == turn.intent and not turn.get(keys.TRANSITIONS):
        return stages.STATE_GRAPH_VALID, {"unchanged": True, "intent": turn.intent, "state": turn.state}
    return None


async def post_response_rules(turn: Turn) -> None:
    before = {"intent": turn.intent, "state": turn.state}
    seen = len(turn.get(keys.TRANSITIONS) or [])
    await run_rules(turn, POST_RESPONSE_RESOLUTION, "PostResponseRulesStep")
    if not turn.settings.flow.state_graph.enabled:
        return
    checks = [{"fromState": t["from"], "toState": t["to"], "intent": t["intent"], "cause": t["cause"]}
              for t in (turn.get(keys.TRANSITIONS) or [])[seen:] if str(t.get("cause", "")).startswith("rule")]
    violations = _violations(turn, checks)
    if violations:
        _violated(turn, violations, keep=before)


def _post_response_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    if turn.snapshot.rules_for(POST_RESPONSE_RESOLUTION):
        return None
    return None, {"reason": "NO_POST_RESPONSE_RULES"}


STEPS = (
    Step(names.RULES, rules),
    Step(names.STATE_GRAPH, state_graph, skip=_state_graph_skip),
    Step(names.POST_RESPONSE_RULES, post_response_rules, skip=_post_response_skip),
)
