"""SCHEMA_EXTRACTION call site: fill a slot schema from the user's words."""

from __future__ import annotations

import copy
import json
from typing import Any

from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.vocab import ANY, POST_SCHEMA_EXTRACTION
from convengine.config.records import OutputSchemaRecord, PromptTemplateRecord
from convengine.llm.prompts import render_for
from convengine.nodes.common import run_rules
from convengine.nodes.schema_scope import finish_schema
from convengine.nodes.slot_schema import compute_facts, deep_merge, meaningful, prune_empty, schema_dict
from convengine.nodes.turn import Turn

_DROP = ("required", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
         "minItems", "maxItems", "pattern", "format")


def extraction_template(turn: Turn) -> PromptTemplateRecord | None:
    """The newest enabled SCHEMA_JSON template for (intent, state), else (intent, ANY)."""
    for state in (turn.state, ANY):
        rows = [t for t in turn.snapshot.prompt_templates if t.enabled and t.output_format == "SCHEMA_JSON"
                and t.intent_code == turn.intent and t.state_code == state]
        if rows:
            return max(rows, key=lambda t: (t.created_at.timestamp() if t.created_at else 0, t.template_id))
    return None


def relaxed(schema: dict[str, Any]) -> dict[str, Any]:
    """What an extraction must satisfy: the fields' types and enums, every field optional and nullable."""
    out = copy.deepcopy(schema)
    _relax(out)
    return out


def _relax(node: object) -> None:
    if not isinstance(node, dict):
        return
    for key in _DROP:
        node.pop(key, None)
    kind = node.get("type")
    if isinstance(kind, str) and kind != "object":
        node["type"] = [kind, "null"]
    if isinstance(node.get("enum"), list) and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    for child in (node.get("properties") or {}).values():
        _relax(child)
    _relax(node.get("items"))
    for key in ("anyOf", "oneOf", "allOf"):
        for child in node.get(key) or []:
            _relax(child)


async def extract(turn: Turn, record: OutputSchemaRecord) -> None:
    template = extraction_template(turn)
    if template is None:
        turn.audit(stages.SCHEMA_EXTRACTION_SKIPPED, {"reason": "NO_SCHEMA_JSON_TEMPLATE", "schemaId": record.schema_id,
                                                 "intent": turn.intent, "state": turn.state})
        finish_schema(turn, record)
        return
    turn.audit(stages.SCHEMA_EXTRACTION_START, {"schemaId": record.schema_id, "templateId": template.template_id})
    schema = schema_dict(record)
    extracted = await _call(turn, record, template, schema)
    values = prune_empty({k: v for k, v in extracted.items() if k in (schema.get("properties") or {})})
    if values:
        deep_merge(turn.context, values)
        if any(meaningful(v) for v in values.values()):
            turn.context.pop("mcp", None)  # fresh identifiers invalidate earlier tool results
    finish_schema(turn, record)
    await run_rules(turn, POST_SCHEMA_EXTRACTION, "SchemaExtractionStep")


async def _call(turn: Turn, record: OutputSchemaRecord, template: PromptTemplateRecord,
                schema: dict[str, Any]) -> dict[str, Any]:
    facts = compute_facts(record, turn.read_context())
    extra = {"schema": json.dumps(schema, ensure_ascii=False), "missing_fields": facts["missing"],
             "missing_field_options": facts["options"], "schema_field_details": facts["field_details"],
             "schema_description": record.description or "", "schema_id": record.schema_id}
    name = f"ce_prompt_template[{template.template_id}]"
    system = render_for(turn, template.system_prompt, template=f"{name}.system_prompt", extra=extra)
    user = render_for(turn, template.user_prompt, template=f"{name}.user_prompt", extra=extra)
    turn.audit(stages.SCHEMA_EXTRACTION_LLM_INPUT, {"system_prompt": system, "user_prompt": user,
                                               "templateId": template.template_id, "schemaId": record.schema_id})
    assert turn.ctx.services.llm is not None
    reply = await turn.ctx.services.llm.json(turn, "SCHEMA_EXTRACTION", system=system, user=user,
                                             schema=relaxed(schema))
    turn.audit(stages.SCHEMA_EXTRACTION_LLM_OUTPUT, {"output": reply})
    turn.set(keys.LAST_LLM, {"stage": "SCHEMA_EXTRACTION", "output": reply})
    return reply if isinstance(reply, dict) else {}
