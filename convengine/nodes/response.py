"""response_resolution: pick the ce_response row by score, render EXACT text or derive it with the LLM."""

from __future__ import annotations

import inspect
import json
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import state as keys
from convengine.catalog.errors import (
    ErrorCode,
    LlmNotConfiguredError,
    PromptRenderError,
    ResponseMappingNotFoundError,
)
from convengine.catalog.vocab import ANY, INTENT_COLLISION
from convengine.config.records import ResponseRecord
from convengine.nodes.collision import collision_text
from convengine.nodes.common import Step, dig
from convengine.nodes.derived import derive
from convengine.nodes.turn import Turn
from convengine.templates.render import referenced_names, render_text
from convengine.templates.variables import template_variables


def score(row: ResponseRecord, intent: str, state: str) -> int | None:
    """ConvEngine's score: 1000 exact state + 100 exact intent + 10 ANY state + 1 null intent - priority."""
    intent_ok = row.intent_code is None or row.intent_code == intent
    state_ok = row.state_code in (state, ANY)
    if not (row.enabled and intent_ok and state_ok):
        return None
    return (1000 * (row.state_code == state) + 100 * (row.intent_code == intent)
            + 10 * (row.state_code == ANY) + 1 * (row.intent_code is None) - row.priority)


def select_response(turn: Turn) -> ResponseRecord:
    scored = [(s, -r.response_id, r) for r in turn.snapshot.responses
              if (s := score(r, turn.intent, turn.state)) is not None]
    if not scored:
        turn.audit(stages.RESPONSE_MAPPING_NOT_FOUND, {"intent": turn.intent, "state": turn.state})
        raise ResponseMappingNotFoundError(
            f"No response found for intent={turn.intent}, state={turn.state}: add a ce_response row for "
            "this intent and state (or state ANY, or a row with no intent as a global fallback)",
            details={"intent": turn.intent, "state": turn.state})
    return max(scored, key=lambda x: (x[0], x[1]))[2]


def render_exact(turn: Turn, row: ResponseRecord) -> str:
    """Render exact_text (strict unless ``template_strict: false``): a missing or null variable fails
    the turn naming the row; any other failure falls back to context.mcp.finalAnswer, else the raw text."""
    source = row.exact_text or ""
    try:
        return render_text(source, template_variables(turn, names=referenced_names(source)),
                           template=f"ce_response[{row.response_id}].exact_text", limits=turn.settings)
    except PromptRenderError as exc:
        if exc.code == ErrorCode.UNRESOLVED_PROMPT_VARIABLE:
            raise
        fallback = dig(turn.read_context(), "mcp", "finalAnswer")
        turn.audit(stages.EXACT_RESPONSE_RENDERING, {"component": "ResponseResolutionStep", "fallbackUsed": True,
                                                "errorClass": exc.details.get("errorClass"), "errorMessage": exc.message,
                                                "templatePreview": source[:200]})
        return str(fallback) if fallback else source


def text_payload(row: ResponseRecord, text: str) -> dict[str, Any]:
    if row.output_format != "JSON":
        return {"type": "TEXT", "value": text}
    try:
        value = json.loads(text)
    except ValueError:
        return {"type": "JSON_TEXT", "value": text}
    return {"type": "JSON", "value": value} if isinstance(value, (dict, list)) else {"type": "JSON_TEXT", "value": text}


async def transform(turn: Turn, payload: dict[str, Any], stage: str) -> dict[str, Any]:
    """Run the response transformer registered for (intent, state, stage), if any."""
    transformer = turn.ctx.services.registries.response_transformers.get((turn.intent, turn.state, stage))
    if transformer is None:
        return payload
    result = transformer(dict(payload), turn.session_dict())
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return payload
    return result if isinstance(result, dict) and "type" in result else {"type": payload["type"], "value": result}


async def response_resolution(turn: Turn) -> None:
    if turn.state == INTENT_COLLISION:
        await _collision(turn)
        return
    row = select_response(turn)
    turn.audit(stages.RESOLVE_RESPONSE, {"responseId": row.response_id, "intent": turn.intent, "state": turn.state,
                                    "responseType": row.response_type, "outputFormat": row.output_format})
    if row.response_type == "DERIVED":
        payload = await _derived(turn, row)
    else:
        payload = text_payload(row, render_exact(turn, row))
        turn.audit(stages.RESPONSE_EXACT, {"text": payload["value"], "responseId": row.response_id})
    payload = await transform(turn, payload, "LLM")
    turn.set(keys.PAYLOAD, payload)
    turn.audit(stages.ASSISTANT_OUTPUT, {"output": payload["value"], "outputFormat": row.output_format,
                                    "responseType": row.response_type, "responseId": row.response_id,
                                    "intent": turn.intent, "state": turn.state})


async def _collision(turn: Turn) -> None:
    """The answer given while the intent is ambiguous (INTENT_COLLISION call site)."""
    text, source = await collision_text(turn)
    payload = await transform(turn, {"type": "TEXT", "value": text}, "LLM")
    turn.set(keys.PAYLOAD, payload)
    turn.audit(stages.INTENT_COLLISION_RESOLVED, {"output": payload["value"], "source": source})
    turn.audit(stages.ASSISTANT_OUTPUT, {"output": payload["value"], "outputFormat": "TEXT", "responseType": "DERIVED",
                                           "responseId": None, "intent": turn.intent, "state": turn.state})


async def _derived(turn: Turn, row: ResponseRecord) -> dict[str, Any]:
    if turn.ctx.services.llm is None:
        call_site = "RESPONSE_JSON" if row.output_format == "JSON" else "RESPONSE_TEXT"
        raise LlmNotConfiguredError(
            f"ce_response[{row.response_id}] is DERIVED ({turn.intent}/{turn.state}) and needs an LLM for call "
            f"site {call_site}; configure a chat model or make the response EXACT",
            details={"callSite": call_site, "table": "ce_response", "rowId": row.response_id})
    return await derive(turn, row)


STEPS = (Step(names.RESPONSE_RESOLUTION, response_resolution),)
