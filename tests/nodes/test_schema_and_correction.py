"""schema_extraction, auto_advance and correction: which prompt extracts the slots, what the model is
held to, slots filled without a model, and edits recognised in the user's words."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from convengine.config.records import PromptTemplateRecord
from convengine.llm import ScriptedLLM
from convengine.nodes.correction import capabilities, single_field_patch
from convengine.nodes.extraction import relaxed
from tests.helpers import engine_on, pack, payload_of, turn_events

AMOUNT_SCHEMA = {"type": "object", "required": ["amount", "term"],
                 "properties": {"amount": {"type": "number", "minimum": 100, "description": "loan amount"},
                                "term": {"type": "integer", "maximum": 60},
                                "purpose": {"type": "string", "enum": ["car", "home"], "pattern": "^[a-z]+$"}}}


def template(template_id: int, state: str, prompt: str, fmt: str = "SCHEMA_JSON", **extra: Any) -> dict[str, Any]:
    return {"template_id": template_id, "intent_code": "LOAN", "state_code": state, "output_format": fmt,
            "system_prompt": prompt, "user_prompt": "{{user_input}}", **extra}


def schema_pack(templates: list[dict[str, Any]], **tables: Any) -> dict[str, Any]:
    return pack(ce_output_schema=[{"schema_id": 9, "intent_code": "LOAN", "state_code": "START", "priority": 1,
                                   "json_schema": AMOUNT_SCHEMA}],
                ce_prompt_template=templates, **tables)


# --- the extraction prompt and schema -------------------------------------------------------------


@pytest.mark.parametrize(("templates", "used"), [
    ([template(1, "ANY", "any-state prompt"), template(2, "START", "start prompt")], "start prompt"),
    ([template(1, "ANY", "any-state prompt")], "any-state prompt"),
    ([template(1, "START", "older"), template(2, "START", "newer"),
      template(3, "START", "disabled", enabled=False)], "newer"),
    ([template(1, "ANY", "any-state prompt"), template(2, "START", "text prompt", fmt="TEXT")], "any-state prompt"),
])
async def test_the_state_s_newest_schema_json_template_drives_the_extraction(
        sqlite_db_url: str, templates: list[dict[str, Any]], used: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"amount": 500}]})
    async with engine_on(sqlite_db_url, schema_pack(templates), llm=llm) as engine:
        result = await engine.aprocess("a loan of 500")
        events = await turn_events(engine, result.conversation_id)
    assert llm.calls_to("SCHEMA_EXTRACTION")[0].system == used
    start = payload_of(events, "SCHEMA_EXTRACTION_START")
    assert start["schemaId"] == 9 and start["templateId"] == next(t["template_id"] for t in templates
                                                                  if t["system_prompt"] == used)
    assert result.context["amount"] == 500


async def test_the_model_is_held_to_the_fields_types_but_may_leave_any_out(sqlite_db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"amount": 50, "purpose": None}]})
    async with engine_on(sqlite_db_url, schema_pack([template(1, "START", "x")]), llm=llm) as engine:
        result = await engine.aprocess("a loan of 50")
    sent = llm.calls_to("SCHEMA_EXTRACTION")[0].schema
    assert sent == relaxed(AMOUNT_SCHEMA)
    assert result.context["amount"] == 50  # below the schema's minimum: kept, the pack's rules judge it
    assert "purpose" not in result.context


def test_relaxing_drops_constraints_and_makes_every_field_nullable() -> None:
    nested = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "array", "minItems": 1, "items": {"type": "string", "format": "email"}},
        "b": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "maxLength": 3}]},
        "c": {"type": ["string", "null"], "enum": ["x", None]}}}
    out = relaxed(nested)
    assert out == {"type": "object", "properties": {
        "a": {"type": ["array", "null"], "items": {"type": ["string", "null"]}},
        "b": {"anyOf": [{"type": ["integer", "null"]}, {"type": ["string", "null"]}]},
        "c": {"type": ["string", "null"], "enum": ["x", None]}}}
    assert nested["required"] == ["a"]  # the pack's schema is left as it was
    assert relaxed(AMOUNT_SCHEMA)["properties"]["purpose"] == {"type": ["string", "null"], "enum": ["car", "home", None]}


# --- without a model -----------------------------------------------------------------------------


async def test_input_params_complete_the_schema_without_a_model_and_its_rules_run(sqlite_db_url: str) -> None:
    rules = [{"phase": "POST_SCHEMA_EXTRACTION", "intent_code": "LOAN", "state_code": "START",
              "rule_type": "JSON_PATH", "match_pattern": "$[?(@.schemaComplete == true)]", "action": "SET_STATE",
              "action_value": "READY"}]
    responses = [{"intent_code": "LOAN", "state_code": "READY", "exact_text": "{{amount}} over {{term}} months"}]
    data = schema_pack([template(1, "START", "x")], ce_rule=rules, ce_response=responses)
    async with engine_on(sqlite_db_url, data) as engine:
        result = await engine.aprocess("loan", input_params={"amount": 900, "term": 12, "purpose": " "})
        events = await turn_events(engine, result.conversation_id)
    assert (result.state, result.payload.value) == ("READY", "900 over 12 months")
    skipped = payload_of(events, "SCHEMA_EXTRACTION_SKIPPED")
    assert (skipped["reason"], sorted(skipped["seeded"]), skipped["schemaComplete"]) == \
        ("NO_LLM_CONFIGURED", ["amount", "term"], True)  # a blank param seeds nothing
    assert "purpose" not in result.context


async def test_auto_advance_publishes_what_is_still_missing(sqlite_db_url: str) -> None:
    responses = [{"intent_code": "LOAN", "state_code": "START", "exact_text": "Still need {{missing_fields}}"}]
    data = schema_pack([template(1, "START", "x")], ce_response=responses)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"term": 24}]})
    async with engine_on(sqlite_db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan over 24 months")
        facts = payload_of(await turn_events(engine, result.conversation_id), "AUTO_ADVANCE_FACTS")
    assert result.payload.value == 'Still need ["amount"]'
    assert (facts["schemaComplete"], facts["hasAnySchemaValue"], facts["missingRequiredFields"], facts["schemaId"]) \
        == (False, True, ["amount"], 9)


# --- correction: what the state's template allows, and single-field edits ---------------------------


def prompt_row(mode: str | None = None, contract: str | None = None) -> PromptTemplateRecord:
    return PromptTemplateRecord(template_id=1, intent_code="LOAN", state_code="CONFIRM", output_format="TEXT",
                                interaction_mode=mode, interaction_contract=contract, created_at=datetime(2024, 1, 1))


@pytest.mark.parametrize(("mode", "contract", "allowed"), [
    ("CONFIRM", None, {"affirm", "edit", "reset"}),
    ("collect", None, {"reset", "structured_input"}),
    ("ERROR", None, {"retry", "reset"}),
    ("PROCESSING", None, {"retry"}),
    ("SOMETHING_ELSE", None, set()),
    ("CONFIRM", '{"allows": ["retry"]}', {"retry"}),  # the contract's list replaces the mode's defaults
    ("CONFIRM", '{"allows": ["edit"], "expects": ["structured_input"]}', {"edit", "structured_input"}),
    ("CONFIRM", '{"expects": ["structured_input"]}', {"affirm", "edit", "reset", "structured_input"}),
    ("CONFIRM", "not json", {"affirm", "edit", "reset"}),
    (None, '["affirm"]', set()),  # a contract that is not an object is ignored
])
def test_capabilities_come_from_the_contract_else_the_mode(mode: str | None, contract: str | None,
                                                           allowed: set[str]) -> None:
    caps = capabilities(prompt_row(mode, contract))
    found = {name for name in ("affirm", "edit", "retry", "reset", "structured_input") if getattr(caps, name)}
    assert found == allowed


def test_without_a_template_nothing_is_allowed() -> None:
    caps = capabilities(None)
    assert not (caps.affirm or caps.edit or caps.retry or caps.reset or caps.structured_input)


@pytest.mark.parametrize(("text", "patch"), [
    ("change the amount to 2,500", ("amount", 2500)),
    ("set term as 36.", ("term", 36)),
    ("update loan amount to 12.5", ("amount", 12.5)),  # by the field's description
    ("make the purpose to home", ("purpose", "home")),
    ("amount 700", ("amount", 700)),  # a field named in the text, the value after it
    ("change the term to thirty", None),  # not an integer: nothing to patch
    ("change the colour to red", None),  # no such field
    ("hello there", None),
])
def test_single_field_patches(text: str, patch: tuple[str, Any] | None) -> None:
    assert single_field_patch(text, AMOUNT_SCHEMA) == patch


async def test_an_edit_in_a_confirm_state_patches_the_slot_and_skips_extraction(db_url: str) -> None:
    rules = [{"phase": "POST_SCHEMA_EXTRACTION", "intent_code": "LOAN", "state_code": "START",
              "rule_type": "JSON_PATH", "match_pattern": "$[?(@.schemaComplete == true)]", "action": "SET_STATE",
              "action_value": "CONFIRM"}]
    responses = [{"intent_code": "LOAN", "state_code": "CONFIRM", "exact_text": "Confirm {{amount}} / {{term}}?"}]
    templates = [template(1, "START", "x"), template(2, "CONFIRM", "-", fmt="TEXT", interaction_mode="CONFIRM")]
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"amount": 900, "term": 12}]},
                      default={"dialogueAct": "EDIT", "confidence": 0.99})
    data = schema_pack(templates, ce_rule=rules, ce_response=responses,
                       settings={"flow": {"dialogue-act": {"resolute": "REGEX_THEN_LLM"}}})
    async with engine_on(db_url, data, llm=llm) as engine:
        first = await engine.aprocess("loan")
        assert first.payload.value == "Confirm 900 / 12?"
        edited = await engine.aprocess("set term to 24", first.conversation_id)
        events = await turn_events(engine, first.conversation_id)
    assert (edited.state, edited.payload.value) == ("CONFIRM", "Confirm 900 / 24?")
    assert llm.count("SCHEMA_EXTRACTION") == 1
    applied = payload_of(events, "CORRECTION_STEP_CORRECTION_PATCH_APPLIED")
    assert (applied["field"], applied["value"], applied["routingDecision"]) == ("term", 24, "APPLY_CORRECTION")
    assert payload_of(events, "SCHEMA_EXTRACTION_SKIPPED")["reason"] == "CORRECTION_STEP"
