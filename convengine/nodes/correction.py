"""correction: confirmation routing and single-field patches, without an LLM call."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import state as keys
from convengine.catalog.vocab import INTERACTION_MODES
from convengine.config.records import OutputSchemaRecord, PromptTemplateRecord
from convengine.nodes.common import Step
from convengine.nodes.schema_scope import current_schema
from convengine.nodes.slot_schema import (
    coerce_field,
    compute_facts,
    field_aliases,
    is_unset,
    normalise_alias,
    schema_dict,
)
from convengine.nodes.turn import Turn
from convengine.rules.scope import in_scope, specificity

RETRY = re.compile(r"^\s*(retry|try again|retry please|please retry|again)\s*[.!?]*\s*$", re.IGNORECASE)
PATCH = re.compile(r"^\s*(?:change|set|update|make)\s+(?:the\s+)?(?P<field>.+?)\s+(?:to|as)\s+(?P<value>.+?)\s*$",
                   re.IGNORECASE | re.DOTALL)

_MODE_CAPS = {
    "affirm": {"CONFIRM"},
    "edit": {"CONFIRM", "REVIEW"},
    "retry": {"ERROR", "PROCESSING"},
    "reset": {"COLLECT", "CONFIRM", "REVIEW", "ERROR"},
    "structured_input": {"COLLECT"},
}


@dataclass(frozen=True, slots=True)
class Capabilities:
    affirm: bool = False
    edit: bool = False
    retry: bool = False
    reset: bool = False
    structured_input: bool = False


def capabilities(template: PromptTemplateRecord | None) -> Capabilities:
    """Contract arrays are authoritative; otherwise the interaction mode's defaults apply."""
    if template is None:
        return Capabilities()
    mode = (template.interaction_mode or "").upper()
    mode = mode if mode in INTERACTION_MODES else "NORMAL"
    contract = _contract(template.interaction_contract)
    caps: dict[str, bool] = {}
    for name, modes in _MODE_CAPS.items():
        group = "expects" if name == "structured_input" else "allows"
        listed = contract.get(group)
        caps[name] = name in listed if isinstance(listed, list) else mode in modes
    return Capabilities(**caps)


def _contract(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def interaction_template(turn: Turn) -> PromptTemplateRecord | None:
    """The most specific enabled template for (intent, state) with a mode or contract; newest first."""
    intent, state = turn.intent, turn.state
    rows = [t for t in turn.snapshot.prompt_templates
            if t.enabled and in_scope(t.intent_code, t.state_code, intent, state)
            and ((t.interaction_mode or "").upper() in INTERACTION_MODES or _contract(t.interaction_contract))]
    if not rows:
        return None
    oldest = datetime.min.replace(tzinfo=None)

    def key(t: PromptTemplateRecord) -> tuple[int, Any, int]:
        created = t.created_at.replace(tzinfo=None) if t.created_at else oldest
        return (specificity(t.intent_code, t.state_code, intent, state), created, t.template_id)

    return max(rows, key=key)


def single_field_patch(text: str, schema: dict[str, Any]) -> tuple[str, Any] | None:
    """(field, value) from "change X to Y" or from a field alias named in the text."""
    aliases = field_aliases(schema)
    props = schema.get("properties") or {}
    match = PATCH.match(text)
    if match:
        field = _resolve_field(normalise_alias(match.group("field")), aliases)
        raw = match.group("value")
    else:
        field, raw = _alias_in_text(text, aliases)
    if not field or raw is None:
        return None
    value = coerce_field(props.get(field) or {}, raw)
    return None if is_unset(value) else (field, value)


def _resolve_field(requested: str, aliases: dict[str, str]) -> str | None:
    hits = [(len(alias), name) for alias, name in aliases.items() if requested and (requested in alias or alias in requested)]
    return max(hits)[1] if hits else None


def _alias_in_text(text: str, aliases: dict[str, str]) -> tuple[str | None, str | None]:
    lowered = text.lower()
    best: tuple[int, str, int] | None = None
    for alias, name in aliases.items():
        spaced = alias.replace(" ", r"[\s_-]*")
        found = re.search(rf"\b{spaced}\b", lowered)
        if found and (best is None or len(alias) > best[0]):
            best = (len(alias), name, found.end())
    if best is None:
        return None, None
    return best[1], text[best[2]:]


def routing_defaults(turn: Turn) -> None:
    """The routing params every turn starts with (set after the dialogue act is final)."""
    act = turn.dialogue_act
    turn.params.update(routing_decision="HANDLE_AS_ANSWER" if act == "ANSWER" else "CONTINUE_STANDARD_FLOW",
                       skip_schema_extraction=False, correction_applied=False, correction_target_field=None)


async def correction(turn: Turn) -> None:
    routing_defaults(turn)
    act = turn.dialogue_act
    record = current_schema(turn)
    if record is None:
        return
    facts = compute_facts(record, turn.read_context())
    caps = capabilities(interaction_template(turn))
    if caps.retry and RETRY.match(turn.user_text):
        _route(turn, "RETRY_IN_PLACE", stages.CORRECTION_STEP_RETRY_REQUESTED, {})
    elif caps.affirm and act == "AFFIRM" and facts["complete"]:
        turn.set(keys.SCHEMA_FACTS, facts)
        _route(turn, "PROCEED_CONFIRMED", stages.CORRECTION_STEP_CONFIRM_ACCEPT, {"schemaId": record.schema_id})
    elif caps.edit and act == "EDIT":
        _patch(turn, record)


def _route(turn: Turn, decision: str, stage: str, payload: dict[str, Any]) -> None:
    turn.params.update(routing_decision=decision, skip_schema_extraction=True, skip_intent_resolution=True)
    turn.audit(stage, {"routingDecision": decision, "intent": turn.intent, "state": turn.state, **payload})


def _patch(turn: Turn, record: OutputSchemaRecord) -> None:
    patch = single_field_patch(turn.user_text, schema_dict(record))
    if patch is None:
        turn.audit(stages.CORRECTION_STEP_PATCH_NOT_APPLIED, {"text": turn.user_text, "schemaId": record.schema_id})
        return
    field, value = patch
    turn.context[field] = value
    turn.set(keys.SCHEMA_FACTS, compute_facts(record, turn.read_context()))
    turn.params.update(correction_applied=True, correction_target_field=field)
    _route(turn, "APPLY_CORRECTION", stages.CORRECTION_STEP_CORRECTION_PATCH_APPLIED, {"field": field, "value": value})


def _correction_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    if current_schema(turn) is not None:
        return None
    return None, {"reason": "NO_SCHEMA"}


STEPS = (Step(names.CORRECTION, correction, skip=_correction_skip),)
