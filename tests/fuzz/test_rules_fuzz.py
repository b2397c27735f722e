"""Property-based tests of the rules engine: any rows either fail validation clearly or run, total and repeatable."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convengine.audit import AuditFilter, TurnAudit
from convengine.catalog.errors import ConfigValidationError, ConvEngineError
from convengine.config_loader import ConfigSnapshot, validate_pack
from convengine.nodes.context import TurnContext
from convengine.nodes.turn import Turn
from convengine.rules.engine import PhaseRun, RuleRegistry
from tests.fuzz.strategies import INTENTS, STATES, json_objects, rule_lists, user_text

BASE: dict[str, Any] = {
    "ce_intent": [{"intent_code": i, "description": i.lower()} for i in INTENTS],
    "ce_intent_classifier": [{"classifier_id": n, "intent_code": "LOAN", "state_code": s, "rule_type": "CONTAINS",
                              "pattern": s.lower(), "priority": n} for n, s in enumerate(STATES, 1)],
    "ce_response": [{"intent_code": "ANY", "state_code": s, "exact_text": s} for s in STATES],
}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def snapshot_or_violations(rules: list[dict[str, Any]]) -> ConfigSnapshot | None:
    pack = {**copy.deepcopy(BASE), "ce_rule": rules}
    try:
        return validate_pack(pack)
    except ConfigValidationError as exc:
        ids = {str(r["rule_id"]) for r in rules}
        for violation in exc.violations:  # every complaint names a real rule row and says why
            assert violation.table == "ce_rule" and str(violation.row_id) in ids and violation.reason, violation
        return None


def run_phase(snapshot: ConfigSnapshot, phase: str, text: str, context: dict[str, Any], intent: str,
              state: str) -> tuple[Any, list[tuple[str, dict[str, Any]]], str, str, dict[str, Any]]:
    audit = TurnAudit("c0ffee00-0000-4000-8000-000000000000", audit_filter=AuditFilter(snapshot.settings.audit))
    ctx = TurnContext(snapshot=snapshot, services=None, audit=audit,  # type: ignore[arg-type]
                      conversation_id=audit.conversation_id, turn_id="t1")
    state_doc = {"intent": intent, "state": state, "context": copy.deepcopy(context), "params": {},
                 "turn_input": {"text": text}, "user_text": text}
    turn = Turn(state_doc, ctx, "rules")  # type: ignore[arg-type]
    run = PhaseRun(phase, snapshot.rules_for(phase), turn, RuleRegistry.with_custom(), "RulesStep",
                   lambda stage, payload: audit.emit(stage, payload))
    try:
        result = asyncio.run(run.run())
    except ConvEngineError as exc:  # a documented failure (e.g. an unknown dialogue act), never anything else
        result = ("error", exc.code, exc.message)
    events = [(e.stage, {k: v for k, v in e.payload.items() if k not in ("_meta", "context")}) for e in audit.events]
    return result, events, turn.intent, turn.state, dict(turn.params)


@FUZZ
@given(rules=rule_lists, text=user_text, context=json_objects, intent=st.sampled_from(INTENTS + ["UNKNOWN"]),
       state=st.sampled_from(STATES + ["UNKNOWN"]), phase=st.sampled_from(["PRE_RESPONSE_RESOLUTION",
                                                                          "POST_DIALOGUE_ACT", "POST_INTENT"]))
def test_rule_passes_are_total_bounded_and_repeatable(rules: list[dict[str, Any]], text: str,
                                                      context: dict[str, Any], intent: str, state: str,
                                                      phase: str) -> None:
    snapshot = snapshot_or_violations(rules)
    if snapshot is None:
        return
    first = run_phase(snapshot, phase, text, context, intent, state)
    second = run_phase(snapshot, phase, text, context, intent, state)
    assert first == second  # same rows, same input: same outcome and the same audit trail

    result, events, final_intent, final_state, _ = first
    targets_i = {intent} | {r["action_value"].upper() for r in rules if r["action"] == "SET_INTENT"}
    targets_s = {state} | {r["action_value"].upper() for r in rules if r["action"] == "SET_STATE"}
    assert final_intent in targets_i and final_state in targets_s
    if not isinstance(result, tuple):
        assert 1 <= result.passes <= 5
        in_phase = {r.rule_id for r in snapshot.rules_for(phase)}
        assert set(result.matched) <= in_phase
        applied = [p["ruleId"] for stage, p in events if stage.startswith("RULE_APPLIED")]
        assert sorted(applied) == sorted(result.matched)


@FUZZ
@given(rules=rule_lists, text=user_text.filter(lambda t: t.strip() and t.strip().upper() != "ANY"))
def test_an_exact_rule_for_the_message_always_fires(rules: list[dict[str, Any]], text: str) -> None:
    pattern = f"  {text.upper() if text.isascii() else text} "  # case and surrounding blanks do not matter
    sentinel = {"rule_id": 99, "phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "ANY", "state_code": "ANY",
                "rule_type": "EXACT", "match_pattern": pattern, "action": "SET_INPUT_PARAM",
                "action_value": "sentinel_hit"}
    snapshot = snapshot_or_violations([*rules, sentinel])
    if snapshot is None:
        return
    result, _, _, _, params = run_phase(snapshot, "PRE_RESPONSE_RESOLUTION", text, {}, "LOAN", "START")
    if not isinstance(result, tuple):
        assert 99 in result.matched and params["sentinel_hit"] is True
