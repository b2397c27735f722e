"""RESPONSE_TEXT / RESPONSE_JSON call sites: DERIVED responses."""

from __future__ import annotations

from typing import Any

from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.catalog.vocab import ANY
from convengine.config.records import PromptTemplateRecord, ResponseRecord
from convengine.llm.prompts import render_for
from convengine.nodes.rules_steps import allowed_edges
from convengine.nodes.turn import Turn


def template_score(t: PromptTemplateRecord, intent: str, state: str) -> int | None:
    """Intent match 20 (null 10); state exact 10, ANY 5 (null 5); None when out of scope."""
    if t.intent_code not in (None, intent) or t.state_code not in (None, state, ANY):
        return None
    return (20 if t.intent_code == intent else 10) + (10 if t.state_code == state else 5)


def response_template(turn: Turn, row: ResponseRecord) -> PromptTemplateRecord:
    scored = [(s, t.template_id, t) for t in turn.snapshot.prompt_templates
              if t.enabled and t.output_format == row.output_format
              and (s := template_score(t, turn.intent, turn.state)) is not None]
    if not scored:
        raise ConvEngineError(
            f"ce_response[{row.response_id}] is DERIVED but no enabled ce_prompt_template has output_format="
            f"{row.output_format} for intent={turn.intent}, state={turn.state}",
            code=ErrorCode.NO_RESPONSE_CONFIGURED, details={"responseId": row.response_id})
    return max(scored, key=lambda x: (x[0], x[1]))[2]


async def derive(turn: Turn, row: ResponseRecord) -> dict[str, Any]:
    template = response_template(turn, row)
    turn.audit(stages.RESOLVE_RESPONSE_SELECTED, {"templateId": template.template_id, "intent": turn.intent,
                                             "outputFormat": row.output_format, "resolver": row.response_type})
    name = f"ce_prompt_template[{template.template_id}]"
    system = render_for(turn, template.system_prompt, template=f"{name}.system_prompt")
    user = render_for(turn, template.user_prompt, template=f"{name}.user_prompt")
    hint = render_for(turn, row.derivation_hint, template=f"ce_response[{row.response_id}].derivation_hint")
    prompt_user = "\n\n".join(part for part in (user, hint) if part)
    turn.audit(stages.RESOLVE_RESPONSE_LLM_INPUT, {"system_prompt": system, "user_prompt": user, "derivation_hint": hint,
                                              "templateId": template.template_id})
    llm = turn.ctx.services.llm
    assert llm is not None
    if row.output_format == "JSON":
        schema = row.json_schema if isinstance(row.json_schema, dict) else {}
        value = await llm.json(turn, "RESPONSE_JSON", system=system, user=prompt_user, schema=schema)
        turn.audit(stages.RESOLVE_RESPONSE_LLM_OUTPUT, {"output": value})
        turn.set(keys.LAST_LLM, {"stage": "RESPONSE_JSON", "output": value})
        if isinstance(value, dict):
            _apply_intent_state(turn, value)
        return {"type": "JSON", "value": value}
    text = (await llm.text(turn, "RESPONSE_TEXT", system=system, user=prompt_user)).strip()
    turn.audit(stages.RESOLVE_RESPONSE_LLM_OUTPUT, {"output": text})
    turn.set(keys.LAST_LLM, {"stage": "RESPONSE_TEXT", "output": text})
    return {"type": "TEXT", "value": text}


def _apply_intent_state(turn: Turn, value: dict[str, Any]) -> None:
    """A JSON reply's intent/state apply only when known and allowed by the state graph."""
    intent = str(value.get("intent") or "").strip().upper() or None
    state = str(value.get("state") or "").strip().upper() or None
    if not intent and not state:
        return
    new_intent = intent or turn.intent
    reason = None
    if intent and intent not in turn.snapshot.enabled_intent_codes:
        reason = f"unknown intent {intent}"
    elif state and not turn.snapshot.is_known_state(state):
        reason = f"unknown state {state}"
    elif state and state != turn.state:
        edges = allowed_edges(turn, new_intent)
        if edges is not None and (turn.state, state) not in edges:
            reason = f"the state graph does not allow {turn.state} -> {state} for {new_intent}"
    if reason:
        turn.audit(stages.RESPONSE_INTENT_STATE_REJECTED, {"intent": intent, "state": state, "reason": reason})
        return
    if intent:
        turn.set_intent(intent, cause="response")
    if state:
        turn.set_state(state, cause="response")
    turn.audit(stages.RESPONSE_INTENT_STATE_APPLIED, {"intent": turn.intent, "state": turn.state})
