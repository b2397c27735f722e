"""INTENT_AGENT call site: scores, MIN_CONFIDENCE, collisions and clarification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from convengine.catalog import ce_config, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.vocab import ANY, INTENT_COLLISION
from convengine.llm.prompts import INTENT_AGENT_SYSTEM, INTENT_AGENT_USER, config_prompt, render_for
from convengine.nodes.common import dig
from convengine.nodes.slot_schema import select_schema
from convengine.nodes.turn import Turn

COMPONENT = "AgentIntentResolver"
AGENT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "intent": {"type": ["string", "null"]}, "state": {"type": ["string", "null"]},
    "confidence": {"type": ["number", "null"]}, "needsClarification": {"type": ["boolean", "null"]},
    "clarificationResolved": {"type": ["boolean", "null"]}, "clarificationQuestion": {"type": ["string", "null"]},
    "intentScores": {}, "followups": {}}}


@dataclass(frozen=True, slots=True)
class Resolution:
    """How intent_resolution resolved the intent (by a classifier or by this agent)."""

    intent: str
    state: str | None
    source: str
    run_post_rules: bool = True


@dataclass
class AgentAnswer:
    intent: str | None
    state: str | None
    confidence: float
    needs_clarification: bool
    question: str | None
    scores: list[tuple[str, float]] = field(default_factory=list)
    followups: list[str] = field(default_factory=list)


def parse_scores(raw: object, allowed: set[str]) -> list[tuple[str, float]]:
    """Array of {intent|code, confidence|score} or object {CODE: score}; allowed codes, 0..1, best first."""
    pairs: list[tuple[Any, Any]] = []  # untrusted: codes are checked below
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict):
                pairs.append((item.get("intent") or item.get("code"), item.get("confidence", item.get("score"))))
    scores: dict[str, float] = {}
    for code, value in pairs:
        try:
            number = min(max(float(value), 0.0), 1.0)
        except (TypeError, ValueError):
            continue
        code = str(code or "").strip().upper()
        if code in allowed:
            scores[code] = max(number, scores.get(code, 0.0))
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def parse_answer(reply: dict[str, Any], allowed: set[str]) -> AgentAnswer:
    scores = parse_scores(reply.get("intentScores"), allowed)
    followups = reply.get("followups", reply.get("follow_ups")) or []
    followups = [followups] if isinstance(followups, str) else [str(f) for f in followups if f]
    intent = str(reply.get("intent") or "").strip().upper() or None
    confidence = reply.get("confidence")
    if intent is None and scores:
        intent, confidence = scores[0]
    state = str(reply.get("state") or "").strip().upper() or None
    return AgentAnswer(intent, state, float(confidence or 0.0), bool(reply.get("needsClarification")),
                       (reply.get("clarificationQuestion") or "").strip() or None, scores, followups)


def _label(turn: Turn, code: str) -> str:
    record = turn.snapshot.intent(code)
    return record.display_name if record and record.display_name else code.replace("_", " ").title()


def _collision(turn: Turn, answer: AgentAnswer) -> bool:
    """Top two scores within COLLISION_GAP_THRESHOLD (and no clarification pending already)."""
    gap = turn.snapshot.config_value(ce_config.AGENT_COLLISION_GAP_THRESHOLD)
    pending = dig(turn.read_context(), "pending_clarification", "question")
    if len(answer.scores) < 2 or pending or answer.scores[0][1] - answer.scores[1][1] > gap:
        return False
    answer.needs_clarification, answer.state = True, INTENT_COLLISION
    answer.intent = answer.scores[0][0]
    answer.question = answer.question or (answer.followups[0] if answer.followups else
                                          f"Did you mean {_label(turn, answer.scores[0][0])} or "
                                          f"{_label(turn, answer.scores[1][0])}?")
    turn.audit(stages.INTENT_AGENT_COLLISION, {"top": answer.scores[:2], "gap": gap, "question": answer.question})
    return True


async def resolve_with_agent(turn: Turn) -> Resolution | None:
    answer = await _ask(turn)
    if answer is None:
        return None
    _collision(turn, answer)
    if answer.needs_clarification and answer.intent and _has_schema(turn, answer.intent):
        turn.audit(stages.INTENT_AGENT_CLARIFICATION_SUPPRESSED_SCHEMA_FLOW, {"intent": answer.intent})
        answer.needs_clarification = False
        answer.state = None if answer.state == INTENT_COLLISION else answer.state
    if answer.needs_clarification:
        return _clarify(turn, answer)
    return _accept(turn, answer)


async def _ask(turn: Turn) -> AgentAnswer | None:
    allowed = turn.snapshot.allowed_intents()
    codes = {i.intent_code for i in allowed}
    turn.params.update(intent_scores=[], intent_top3=[], followups=[])
    extra = {"allowed_intents": [{"code": i.intent_code, "description": i.description, "llmHint": i.llm_hint,
                                  "priority": i.priority} for i in allowed],
             "intent_collision_candidates": turn.read_params().get(pk.INTENT_COLLISION_CANDIDATES) or [],
             "pending_clarification": dig(turn.read_context(), "pending_clarification", "question") or ""}
    system, sname = config_prompt(turn, ce_config.AGENT_SYSTEM_PROMPT, INTENT_AGENT_SYSTEM)
    user, uname = config_prompt(turn, ce_config.AGENT_USER_PROMPT, INTENT_AGENT_USER)
    system, user = render_for(turn, system, template=sname, extra=extra), render_for(turn, user, template=uname,
                                                                                    extra=extra)
    turn.audit(stages.INTENT_AGENT_LLM_INPUT, {"system_prompt": system, "user_prompt": user})
    assert turn.ctx.services.llm is not None
    reply = await turn.ctx.services.llm.json(turn, "INTENT_AGENT", system=system, user=user, schema=AGENT_SCHEMA)
    turn.audit(stages.INTENT_AGENT_LLM_OUTPUT, {"output": reply})
    turn.set(keys.LAST_LLM, {"stage": "INTENT_AGENT", "output": reply})
    if not isinstance(reply, dict):
        turn.audit(stages.INTENT_AGENT_REJECTED, {"reason": "REPLY_NOT_AN_OBJECT"})
        return None
    answer = parse_answer(reply, codes)
    top3 = [{"intent": c, "confidence": s} for c, s in answer.scores[:3]]
    turn.params.update(intent_scores=[{"intent": c, "confidence": s} for c, s in answer.scores], intent_top3=top3,
                       followups=answer.followups)
    turn.audit(stages.INTENT_AGENT_SCORES, {"scores": top3, "all": len(answer.scores)})
    return answer


def _has_schema(turn: Turn, intent: str) -> bool:
    return any(s.enabled and s.intent_code == intent for s in turn.snapshot.output_schemas) or \
        select_schema(turn.snapshot, intent, ANY) is not None


def _known_state(turn: Turn, state: str | None) -> str | None:
    if state and state != INTENT_COLLISION and not turn.snapshot.is_known_state(state):
        turn.audit(stages.INTENT_AGENT_STATE_IGNORED, {"state": state, "reason": "UNKNOWN_STATE"})
        return None
    return state


def _clarify(turn: Turn, answer: AgentAnswer) -> Resolution | None:
    if not answer.question or not answer.intent:
        turn.audit(stages.INTENT_AGENT_REJECTED, {"reason": "needsClarification without question"})
        return None
    turn.context["pending_clarification"] = {"question": answer.question, "reason": "AGENT",
                                             "candidates": [c for c, _ in answer.scores[:3]]}
    turn.audit(stages.INTENT_AGENT_NEEDS_CLARIFICATION, {"intent": answer.intent, "state": answer.state,
                                                    "question": answer.question})
    return Resolution(answer.intent, _known_state(turn, answer.state), "AGENT", run_post_rules=False)


def _accept(turn: Turn, answer: AgentAnswer) -> Resolution | None:
    allowed = {i.intent_code for i in turn.snapshot.allowed_intents()}
    minimum = turn.snapshot.config_value(ce_config.AGENT_MIN_CONFIDENCE)
    if not answer.intent or answer.intent not in allowed:
        turn.audit(stages.INTENT_AGENT_REJECTED, {"reason": "INTENT_NOT_ALLOWED", "intent": answer.intent})
        return None
    if answer.confidence < minimum:
        turn.audit(stages.INTENT_AGENT_REJECTED, {"reason": "LOW_CONFIDENCE", "intent": answer.intent,
                                             "confidence": answer.confidence, "minConfidence": minimum})
        return None
    turn.audit(stages.INTENT_AGENT_ACCEPTED, {"intent": answer.intent, "state": answer.state,
                                         "confidence": answer.confidence, "scores": answer.scores[:3]})
    return Resolution(answer.intent, _known_state(turn, answer.state), "AGENT")
