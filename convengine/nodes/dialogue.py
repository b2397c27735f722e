"""dialogue_act (regex, then the LLM when configured) and interaction_policy (the SUBJECT:ACT matrix)."""

from __future__ import annotations

from typing import Any

from convengine._internal.textmatch import RegexTimeoutError, cached_regex
from convengine.catalog import ce_config, names, stages
from convengine.catalog import params as pk
from convengine.catalog.vocab import POST_DIALOGUE_ACT
from convengine.nodes.common import Step, dig, resolved, run_rules
from convengine.nodes.correction import routing_defaults
from convengine.nodes.dialogue_classifier import classify_with_llm
from convengine.nodes.turn import Turn
from convengine.rules.scope import in_scope

REGEX_ACTS = ("AFFIRM", "NEGATE", "EDIT", "RESET", "GREETING")
ANSWER_MAX_CHARS = 80


def classify_by_regex(turn: Turn) -> tuple[str, float]:
    """ConvEngine's regex classification, first hit wins."""
    text = turn.user_text.strip()
    if not text:
        return "NEW_REQUEST", 0.40
    timeout = turn.settings.regex_timeout_ms / 1000
    for act in REGEX_ACTS:
        pattern = turn.snapshot.config_value(ce_config.DIALOGUE_ACT_REGEX[act])
        try:
            if pattern and cached_regex(pattern, timeout).fullmatch(text):
                return act, 0.95
        except RegexTimeoutError:
            turn.audit(stages.DIALOGUE_ACT_PATTERN_TIMEOUT, {"act": act})
    if text.endswith("?"):
        return "QUESTION", 0.70
    if (_clarifying(turn) or _locked(turn)) and len(text) <= ANSWER_MAX_CHARS:
        return "ANSWER", 0.75
    return "NEW_REQUEST", 0.70


def _clarifying(turn: Turn) -> bool:
    return bool(dig(turn.read_context(), "pending_clarification", "question"))


def _locked(turn: Turn) -> bool:
    return bool(dig(turn.read_context(), "intent_lock", "locked"))


def llm_wanted(turn: Turn, regex_confidence: float) -> bool:
    mode = turn.settings.flow.dialogue_act.resolute
    if mode == "REGEX_ONLY":
        return False
    return mode == "LLM_ONLY" or regex_confidence < turn.settings.flow.dialogue_act.llm_threshold


async def dialogue_act(turn: Turn) -> None:
    act, confidence = classify_by_regex(turn)
    params = turn.params
    params.update({"dialogue_act_regex": act, "dialogue_act_regex_confidence": confidence,
                   "dialogue_act_guard_applied": False})
    outcome = {"act": act, "confidence": confidence, "source": "REGEX"}
    if llm_wanted(turn, confidence):
        outcome = await _with_llm(turn, act, confidence)
    params.update({"dialogue_act": outcome["act"], "dialogue_act_confidence": outcome["confidence"],
                   "dialogue_act_source": outcome["source"]})
    params.setdefault(pk.RESOLVED_USER_INPUT, turn.resolved_input)
    turn.audit(stages.DIALOGUE_ACT_CLASSIFIED, {
        "dialogueAct": outcome["act"], "confidence": outcome["confidence"], "source": outcome["source"],
        "regexAct": act, "regexConfidence": confidence, "llmAct": params.get(pk.DIALOGUE_ACT_LLM_CANDIDATE),
        "standaloneQuery": turn.standalone_query, "mode": turn.settings.flow.dialogue_act.resolute})
    await run_rules(turn, POST_DIALOGUE_ACT, "DialogueActStep")

    routing_defaults(turn)


async def _with_llm(turn: Turn, act: str, confidence: float) -> dict[str, Any]:
    """Ask the LLM (issue: LLM call sites); without one, keep the regex result and say so."""
    if turn.ctx.services.llm is None:
        turn.audit(stages.DIALOGUE_ACT_LLM_SKIPPED, {"reason": "NO_LLM_CONFIGURED", "callSite": "DIALOGUE_ACT",
                                                "regexAct": act, "regexConfidence": confidence})
        return {"act": act, "confidence": confidence, "source": "REGEX_FALLBACK"}
    return await classify_with_llm(turn, act, confidence)


# --- interaction policy ----------------------------------------------------------------


def has_pending_action(turn: Turn) -> bool:
    ctx, params = turn.read_context(), turn.read_params()
    if ctx.get("pending_action") or ctx.get("pendingAction"):
        return True
    if params.get(pk.PENDING_ACTION_KEY) or params.get(pk.PENDING_ACTION_TASK):
        return True
    if not (resolved(turn.intent) and resolved(turn.state)):
        return False
    return any(a.enabled and in_scope(a.intent_code, a.state_code, turn.intent, turn.state)
               for a in turn.snapshot.pending_actions)


def has_pending_slot(turn: Turn) -> bool:
    ctx = turn.read_context()
    return bool(ctx.get("pending_slot") or ctx.get("pendingSlot"))


def decide(turn: Turn, act: str, pending_action: bool, pending_slot: bool) -> tuple[str, bool]:
    cfg = turn.settings.flow.interaction_policy
    if cfg.require_resolved_intent_and_state and not (resolved(turn.intent) and resolved(turn.state)):
        return "RECLASSIFY_INTENT", False
    subject = "PENDING_ACTION" if pending_action else "PENDING_SLOT" if pending_slot else "NONE"
    decision = {k.upper(): v for k, v in cfg.matrix.items()}.get(f"{subject}:{act}")
    if decision:
        return decision.upper(), True
    if cfg.execute_pending_on_affirm and pending_action and act == "AFFIRM":
        return "EXECUTE_PENDING_ACTION", True
    if cfg.reject_pending_on_negate and pending_action and act == "NEGATE":
        return "REJECT_PENDING_ACTION", True
    if cfg.fill_pending_slot_on_non_new_request and pending_slot and act not in ("NEW_REQUEST", "GREETING"):
        return "FILL_PENDING_SLOT", True
    return "RECLASSIFY_INTENT", False


async def interaction_policy(turn: Turn) -> None:
    act = turn.dialogue_act
    pending_action, pending_slot = has_pending_action(turn), has_pending_slot(turn)
    decision, skip = decide(turn, act, pending_action, pending_slot)
    turn.params[pk.POLICY_DECISION] = decision
    turn.params[pk.SKIP_INTENT_RESOLUTION] = skip
    turn.audit(stages.INTERACTION_POLICY_DECIDED, {
        "dialogueAct": act, "policyDecision": decision, "skipIntentResolution": skip,
        "hasPendingAction": pending_action, "hasPendingSlot": pending_slot,
        "intent": turn.intent, "state": turn.state})


STEPS = (
    Step(names.DIALOGUE_ACT, dialogue_act),
    Step(names.INTERACTION_POLICY, interaction_policy),
)
