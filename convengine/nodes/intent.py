"""intent_resolution (schema lock, sticky intent, policy skip, classifiers, agent), the resolving path's
rule phase (POST_CLASSIFIER_INTENT or POST_AGENT_INTENT, then POST_INTENT), reset_resolved_intent and
fallback_intent_state."""

from __future__ import annotations

import re
from typing import Any

from convengine._internal.textmatch import RegexTimeoutError
from convengine.catalog import ce_config, names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.booleans import truthy
from convengine.catalog.vocab import (
    INTENT_COLLISION,
    POST_AGENT_INTENT,
    POST_CLASSIFIER_INTENT,
    POST_INTENT,
    UNKNOWN,
)
from convengine.llm.spend import capped
from convengine.nodes.bootstrap import RESET_COMMANDS, wipe
from convengine.nodes.common import Step, dig, resolved, run_rules
from convengine.nodes.flow_matching import audit_small_talk, score_small_talk
from convengine.nodes.intent_agent import Resolution, resolve_with_agent
from convengine.nodes.knowledge import semantic_scores
from convengine.nodes.schema_scope import current_schema
from convengine.nodes.slot_schema import compute_facts
from convengine.nodes.turn import Turn

FORCE_PARAMS = ("force_intent_resolution", "resolve_intent", "switch_intent", "switch_flow", "switch_mode")
SWITCH_PHRASES = re.compile(r"\b(switch intent|change intent|change flow|change mode)\b", re.IGNORECASE)


def collection_active(turn: Turn) -> bool:
    """Locked, or the current intent has a schema (state, else ANY) that context does not complete."""
    if dig(turn.read_context(), "intent_lock", "locked"):
        return True
    record = current_schema(turn) if resolved(turn.intent) else None
    return record is not None and not compute_facts(record, turn.read_context())["complete"]


def force_signal(turn: Turn) -> str | None:
    """Why intent resolution should run despite schema collection (the sticky-intent escape)."""
    text = turn.user_text.strip().lower()
    if dig(turn.read_context(), "pending_clarification", "question"):
        return "PENDING_CLARIFICATION"
    if text in RESET_COMMANDS:
        return "RESET_COMMAND"
    params = turn.read_params()
    for key in FORCE_PARAMS:
        if truthy(params.get(key)):
            return f"INPUT_PARAM:{key}"
    if text.startswith("switch to ") or SWITCH_PHRASES.search(text):
        return "SWITCH_PHRASE"
    return None


def _lock(turn: Turn, stage: str) -> None:
    turn.context["intent_lock"] = {"locked": True, "reason": "SCHEMA_INCOMPLETE"}
    turn.context.pop("pending_clarification", None)
    turn.audit(stage, {"intent": turn.intent, "state": turn.state, "reason": "SCHEMA_INCOMPLETE"})


def _skip_for_collection(turn: Turn) -> bool:
    if not collection_active(turn):
        return False
    signal = force_signal(turn)
    sticky = turn.snapshot.config_value(ce_config.STICKY_INTENT)
    if sticky and signal:
        turn.context["intent_lock"] = {"locked": False, "reason": None}
        turn.audit(stages.INTENT_RESOLVE_FORCED, {"signal": signal, "intent": turn.intent})
        return False
    _lock(turn, stages.INTENT_RESOLVE_SKIPPED_STICKY_INTENT if sticky else stages.INTENT_RESOLVE_SKIPPED_SCHEMA_COLLECTION)
    return True


def classify(turn: Turn, semantic: dict[int, bool] | None = None) -> Resolution | None:
    """Every enabled classifier of an enabled intent; one distinct intent wins, several collide.
    ``semantic`` says which SEMANTIC rows matched by embedding similarity."""
    enabled = turn.snapshot.enabled_intent_codes
    rows = sorted((c for c in turn.snapshot.classifiers if c.enabled and c.intent_code in enabled),
                  key=lambda c: (c.priority, c.classifier_id))
    talk = score_small_talk(turn, rows, semantic)  # small talk is scored before intents
    if talk.row is not None and talk.strong:
        return Resolution(talk.row.intent_code, talk.row.state_code or UNKNOWN, "CLASSIFIER")
    rows = talk.rest
    hits = []
    for row in rows:
        try:
            if (semantic or {}).get(row.classifier_id) or (row.matcher is not None
                                                           and row.matcher.matches(turn.user_text)):
                hits.append(row)
        except RegexTimeoutError as exc:
            turn.audit(stages.INTENT_CLASSIFIER_PATTERN_TIMEOUT, {"classifierId": row.classifier_id, "error": exc.message})
    intents = list(dict.fromkeys(h.intent_code for h in hits))
    if len(intents) > 1:
        turn.params[pk.INTENT_COLLISION_CANDIDATES] = intents
        turn.audit(stages.INTENT_CLASSIFIER_COLLISION, {"matchedIntents": intents,
                                                   "matchedByRule": {h.classifier_id: h.intent_code for h in hits}})
        return None
    if not hits and talk.row is not None:  # small talk below its score wins only when nothing else matched
        audit_small_talk(turn, talk)
        return Resolution(talk.row.intent_code, talk.row.state_code or UNKNOWN, "CLASSIFIER")
    if not hits:
        turn.audit(stages.INTENT_CLASSIFIER_NO_MATCH, {"classifiers": len(rows)})
        return None
    first = hits[0]
    turn.audit(stages.INTENT_CLASSIFICATION_MATCHED, {"intent": first.intent_code, "state": first.state_code,
                                                 "classifierId": first.classifier_id, "ruleType": first.rule_type})
    return Resolution(first.intent_code, first.state_code or UNKNOWN, "CLASSIFIER")


async def _agent(turn: Turn) -> Resolution | None:
    if turn.ctx.services.llm is None:
        turn.audit(stages.INTENT_AGENT_SKIPPED, {"reason": "NO_LLM_CONFIGURED", "callSite": "INTENT_AGENT"})
        return None
    if not turn.snapshot.allowed_intents():
        turn.audit(stages.INTENT_AGENT_SKIPPED, {"reason": "NO_ALLOWED_INTENTS"})
        return None

    if await capped(turn, "INTENT_AGENT"):
        turn.audit(stages.INTENT_AGENT_SKIPPED, {"reason": "SPEND_CAP_REACHED", "callSite": "INTENT_AGENT"})
        return None

    return await resolve_with_agent(turn)


async def intent_resolution(turn: Turn) -> None:
    lock = turn.read_context().get("intent_lock") or {}
    turn.audit(stages.INTENT_RESOLVE_START, {"previousIntent": turn.intent, "intentLocked": bool(lock.get("locked")),
                                        "intentLockReason": lock.get("reason")})
    if _skip_for_collection(turn):
        return
    if truthy(turn.read_params().get(pk.SKIP_INTENT_RESOLUTION)) and resolved(turn.intent) and resolved(turn.state):
        turn.audit(stages.INTENT_RESOLVE_SKIPPED_POLICY, {"policyDecision": turn.read_params().get(pk.POLICY_DECISION)})
        return
    by_classifier = classify(turn, await semantic_scores(turn))
    result = by_classifier or await _agent(turn)
    if result is None:
        turn.params[pk.INTENT_UNMATCHED] = True  # no classifier or agent matched (the knowledge fallback's cue)
        turn.audit(stages.INTENT_RESOLVE_NO_CHANGE, {"intent": turn.intent, "state": turn.state})
        return
    await _apply(turn, result, by_classifier)


async def _apply(turn: Turn, result: Resolution, by_classifier: Resolution | None) -> None:
    turn.set_intent(result.intent, cause=result.source)
    if result.state:
        turn.set_state(result.state, cause=result.source)
    elif turn.state == INTENT_COLLISION:  # a resolved collision must not stay in the collision state
        turn.set_state(UNKNOWN, cause=result.source)
    if result.run_post_rules:
        turn.context.pop("pending_clarification", None)
    turn.audit(stages.intent_resolved_by(result.source), {
        "resolvedIntent": result.intent, "source": result.source,
        "classifierIntent": by_classifier.intent if by_classifier else None,
        "agentIntent": None if by_classifier else result.intent})
    if result.run_post_rules:
        await post_intent_rules(turn, by_classifier=by_classifier is not None)


async def post_intent_rules(turn: Turn, *, by_classifier: bool) -> None:
    """The resolving path's phase (ConvEngine's: a row scoped to one path fires only on that path), then
    convengine's POST_INTENT for rows meant for either path (run only when the pack has such rows)."""
    turn.params[pk.POST_INTENT_RULE] = True
    source = "IntentResolutionStep Classifier" if by_classifier else "AgentIntentResolver"
    origin = "RULES_STEP" if by_classifier else "AGENT_INTENT_RESOLVER"
    await run_rules(turn, POST_CLASSIFIER_INTENT if by_classifier else POST_AGENT_INTENT, source, origin=origin)
    if turn.snapshot.rules_for(POST_INTENT):
        await run_rules(turn, POST_INTENT, source, origin=origin)


def reset_intent_codes(turn: Turn) -> list[str]:
    codes_text = turn.snapshot.config_value(ce_config.RESET_INTENT_CODES) or ""
    return [c.strip().upper() for c in codes_text.split(",") if c.strip()]


async def reset_resolved_intent(turn: Turn) -> None:
    codes = reset_intent_codes(turn)
    if turn.intent.upper() in codes:
        resolved_intent = turn.intent
        wipe(turn, "INTENT_RESOLVED_RESET", extra={"matchedResetIntentCodes": codes, "resolvedIntent": resolved_intent})
        turn.route_to(names.RULES)


async def fallback_intent_state(turn: Turn) -> None:
    if not turn.get(keys.INTENT):
        turn.set(keys.INTENT, UNKNOWN)
        turn.audit(stages.INTENT_MISSING, {"fallback": UNKNOWN})
    if not turn.get(keys.STATE):
        turn.set(keys.STATE, UNKNOWN)
        turn.audit(stages.STATE_MISSING, {"fallback": UNKNOWN})


def _reset_intent_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if turn.intent.upper() in reset_intent_codes(turn) else (None, {"reason": "NOT_A_RESET_INTENT"})


def _fallback_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if not (turn.get(keys.INTENT) and turn.get(keys.STATE)) else (None, {"reason": "INTENT_AND_STATE_SET"})


STEPS = (
    Step(names.INTENT_RESOLUTION, intent_resolution),
    Step(names.RESET_RESOLVED_INTENT, reset_resolved_intent, skip=_reset_intent_skip, routes=(names.RULES,)),
    Step(names.FALLBACK_INTENT_STATE, fallback_intent_state, skip=_fallback_skip),
)
