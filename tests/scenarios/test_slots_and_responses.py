"""Schema extraction, corrections, DERIVED responses, transformers and memory, with ScriptedLLM."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, LlmNotConfiguredError
from convengine.llm import ScriptedLLM
from tests.conftest import EXAMPLES
from tests.helpers import assert_in_order, engine_on, pack, payload_of, turn_events, turn_stages

pytestmark = pytest.mark.asyncio

SCHEMA = {"type": "object", "required": ["name", "amount", "term"],
          "properties": {"name": {"type": "string", "description": "applicant name"},
                         "amount": {"type": "number"}, "term": {"type": "integer"},
                         "purpose": {"type": "string", "enum": ["car", "home", "study"]},
                         "notes": {"type": "string"}}}


def slot_pack(**extra: Any) -> dict[str, Any]:
    tables: dict[str, Any] = {
        "ce_output_schema": [{"schema_id": 5, "intent_code": "LOAN", "state_code": "ANY", "priority": 1,
                              "json_schema": SCHEMA}],
        "ce_prompt_template": [
            {"template_id": 31, "intent_code": "LOAN", "state_code": "START", "output_format": "SCHEMA_JSON",
             "system_prompt": "Extract.", "user_prompt": "Schema {{schema}} missing {{missing_fields}}: {{user_input}}"},
            {"template_id": 32, "intent_code": "LOAN", "state_code": "CONFIRM", "output_format": "TEXT",
             "interaction_mode": "CONFIRM", "system_prompt": "-", "user_prompt": "-"},
        ],
        "ce_rule": [{"phase": "POST_SCHEMA_EXTRACTION", "intent_code": "LOAN", "state_code": "START",
                     "rule_type": "JSON_PATH", "match_pattern": "$[?(@.schemaComplete == true)]",
                     "action": "SET_STATE", "action_value": "CONFIRM"}],
        "ce_response": [{"intent_code": "LOAN", "state_code": "CONFIRM",
                         "exact_text": "Confirm {{name}} {{amount}} {{term}}?"},
                        {"intent_code": "LOAN", "state_code": "START", "exact_text": "Need {{missing_fields}}"}],
    }
    for key, value in extra.items():
        tables.setdefault(key, []).extend(value)
    data = pack(**tables)
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "REGEX_THEN_LLM"
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    return data


async def test_extraction_merges_and_never_erases(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [
        {"name": "Ann", "amount": None, "term": None, "notes": "  "},
        {"name": None, "amount": 5000, "term": None, "purpose": "car", "unexpected": "dropped"},
    ]}, default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        first = await engine.aprocess("a loan for Ann")
        assert (first.intent, first.state) == ("LOAN", "START")
        assert first.context["name"] == "Ann" and "notes" not in first.context
        assert first.payload.value == 'Need ["amount", "term"]'
        assert first.context["intent_lock"] == {"locked": True, "reason": "SCHEMA_INCOMPLETE"}
        call = llm.calls_to("SCHEMA_EXTRACTION")[0]
        assert '"required": ["name", "amount", "term"]' in call.user and call.schema is not None
        second = await engine.aprocess("5000 for a car", first.conversation_id)
        assert second.context["name"] == "Ann"  # a null never erases
        assert second.context["amount"] == 5000 and "unexpected" not in second.context
        events = await turn_events(engine, first.conversation_id)
        stages = [e.stage for e in events]
        assert_in_order(stages, ["INTENT_RESOLVE_SKIPPED_STICKY_INTENT", "SCHEMA_EXTRACTION_START",
                                 "SCHEMA_EXTRACTION_LLM_INPUT", "LLM_CALL", "SCHEMA_EXTRACTION_LLM_OUTPUT",
                                 "SCHEMA_STATUS", "RULE_NO_MATCH (SchemaExtractionStep)", "AUTO_ADVANCE_FACTS"])
        status = payload_of(events, "SCHEMA_STATUS")
        assert status["missingRequiredFields"] == ["term"] and status["schemaComplete"] is False


async def test_completing_the_schema_unlocks_and_post_schema_rules_move_on(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"name": "Ann", "amount": 5000, "term": 12}]},
                      default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        result = await engine.aprocess("loan: Ann, 5000 over 12 months")
        assert (result.state, result.payload.value) == ("CONFIRM", "Confirm Ann 5000 12?")
        assert result.context["intent_lock"]["locked"] is False
        assert "RULE_APPLIED (SchemaExtractionStep)" in await turn_stages(engine, result.conversation_id)


async def test_input_params_seed_the_schema(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"amount": 800}]}, default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        result = await engine.aprocess("loan please", input_params={"name": "Bo", "term": 6})
        assert (result.context["name"], result.context["term"], result.context["amount"]) == ("Bo", 6, 800)
        assert result.state == "CONFIRM"


async def test_fresh_values_invalidate_tool_results(db_url: str) -> None:
    def remember(task: Any) -> None:
        task.context["mcp"] = {"finalAnswer": "stale"}

    rules = [{"phase": "POST_INTENT", "intent_code": "LOAN", "state_code": "START", "rule_type": "EXACT",
              "match_pattern": "ANY", "action": "SET_TASK", "action_value": "t:remember"}]
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [{"name": "Ann"}]}, default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(ce_rule=rules), llm=llm, tasks={"t": {"remember": remember}}) as engine:
        result = await engine.aprocess("loan for Ann")
        assert "mcp" not in result.context


async def test_a_state_without_a_schema_json_template_never_crashes(db_url: str) -> None:
    data = slot_pack()
    data["ce_prompt_template"] = [t for t in data["ce_prompt_template"] if t["output_format"] != "SCHEMA_JSON"]
    llm = ScriptedLLM(default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan")
        assert result.state == "START" and llm.count("SCHEMA_EXTRACTION") == 0
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "SCHEMA_EXTRACTION_SKIPPED")["reason"] == "NO_SCHEMA_JSON_TEMPLATE"


async def test_without_an_llm_an_incomplete_schema_fails_naming_the_call_site_and_row(db_url: str) -> None:
    async with engine_on(db_url, slot_pack()) as engine:
        with pytest.raises(LlmNotConfiguredError) as info:
            await engine.aprocess("loan")
        assert info.value.code == ErrorCode.LLM_NOT_CONFIGURED
        assert info.value.details["callSite"] == "SCHEMA_EXTRACTION" and "ce_output_schema[5]" in info.value.message
        result = await engine.aprocess("loan", input_params={"name": "A", "amount": 1, "term": 2})
        assert result.state == "CONFIRM"  # complete from params: nothing to extract, no LLM needed


async def to_confirm(engine: Any, llm: ScriptedLLM) -> str:
    llm.add("SCHEMA_EXTRACTION", {"name": "Ann", "amount": 5000, "term": 12})
    first = await engine.aprocess("loan: Ann, 5000 over 12 months")
    assert first.state == "CONFIRM"
    llm.reset_log()
    return first.conversation_id


async def test_confirm_accept_skips_extraction_and_intent(db_url: str) -> None:
    llm = ScriptedLLM(default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        cid = await to_confirm(engine, llm)
        await engine.aprocess("yes", cid)
        assert llm.count() == 0  # regex AFFIRM: no dialogue-act call; confirmed: no extraction call
        events = await turn_events(engine, cid)
        assert payload_of(events, "CORRECTION_STEP_CONFIRM_ACCEPT")["routingDecision"] == "PROCEED_CONFIRMED"
        assert payload_of(events, "SCHEMA_EXTRACTION_SKIPPED")["reason"] == "CORRECTION_STEP"
        assert "INTENT_RESOLVE_SKIPPED_POLICY" in [e.stage for e in events]


@pytest.mark.parametrize(("text", "field", "value"), [
    ("change the amount to 7,500", "amount", 7500),
    ("set term as 24", "term", 24),
    ("update applicant name to Bea Smith.", "name", "Bea Smith"),
    ("make purpose to Home", "purpose", "home"),
])
async def test_an_edit_patches_one_field_without_an_llm_extraction(db_url: str, text: str, field: str,
                                                                   value: Any) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": {"dialogueAct": "EDIT", "confidence": 0.95}})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        cid = await to_confirm(engine, llm)
        llm.reset_log()
        result = await engine.aprocess(text, cid)
        assert result.context[field] == value
        assert llm.sites() == ["DIALOGUE_ACT"]
        events = await turn_events(engine, cid)
        patch = payload_of(events, "CORRECTION_STEP_CORRECTION_PATCH_APPLIED")
        assert (patch["field"], patch["value"]) == (field, value)
        state = await engine.astate(cid)
        assert state["input_params"].get("correction_applied") is None  # turn-scoped


async def test_an_edit_that_cannot_be_coerced_changes_nothing(db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": {"dialogueAct": "EDIT", "confidence": 0.95}}, default={})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        cid = await to_confirm(engine, llm)
        result = await engine.aprocess("change the term to forever", cid)
        assert result.context["term"] == 12
        assert "CORRECTION_STEP_PATCH_NOT_APPLIED" in await turn_stages(engine, cid)


async def test_retry_in_place_when_the_contract_allows_it(db_url: str) -> None:
    data = slot_pack()
    data["ce_prompt_template"][1]["interaction_contract"] = '{"allows": ["retry"]}'
    llm = ScriptedLLM(default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(db_url, data, llm=llm) as engine:
        cid = await to_confirm(engine, llm)
        await engine.aprocess("try again!", cid)
        events = await turn_events(engine, cid)
        assert payload_of(events, "CORRECTION_STEP_RETRY_REQUESTED")["routingDecision"] == "RETRY_IN_PLACE"
        assert llm.count("SCHEMA_EXTRACTION") == 0
        # the contract is authoritative: affirm is no longer allowed, so "yes" does not confirm
        await engine.aprocess("yes", cid)
        assert "CORRECTION_STEP_CONFIRM_ACCEPT" not in await turn_stages(engine, cid)


DERIVED = [{"response_id": 60, "intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED",
            "output_format": "TEXT", "derivation_hint": "Mention {{intent}} politely"}]
TEMPLATES = [
    {"template_id": 61, "intent_code": "LOAN", "state_code": "ANY", "output_format": "TEXT",
     "system_prompt": "ANY-state template", "user_prompt": "{{user_input}}"},
    {"template_id": 62, "intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
     "system_prompt": "Exact template", "user_prompt": "User said {{user_input}} in {{state}}"},
    {"template_id": 63, "output_format": "TEXT", "system_prompt": "Global template", "user_prompt": "{{user_input}}"},
]


async def test_derived_text_uses_the_best_template_and_renders_the_hint(db_url: str) -> None:
    data = pack(ce_response=DERIVED, ce_prompt_template=TEMPLATES)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    llm = ScriptedLLM({"RESPONSE_TEXT": lambda call: f"[{call.system}] {call.user}"})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan please")
        assert result.payload.value == "[Exact template] User said loan please in START\n\nMention LOAN politely"
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "RESOLVE_RESPONSE_SELECTED")["templateId"] == 62
        assert_in_order([e.stage for e in events], ["RESOLVE_RESPONSE", "RESOLVE_RESPONSE_SELECTED",
                                                    "RESOLVE_RESPONSE_LLM_INPUT", "LLM_CALL",
                                                    "RESOLVE_RESPONSE_LLM_OUTPUT", "ASSISTANT_OUTPUT"])


async def test_without_an_llm_a_derived_response_fails_naming_the_row(db_url: str) -> None:
    data = pack(ce_response=DERIVED, ce_prompt_template=TEMPLATES)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    async with engine_on(db_url, data) as engine:
        with pytest.raises(LlmNotConfiguredError, match=r"ce_response\[60\].*RESPONSE_TEXT"):
            await engine.aprocess("loan")


JSON_RESPONSE = [{"response_id": 70, "intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED",
                  "output_format": "JSON", "json_schema": {"type": "object", "required": ["answer"],
                                                           "properties": {"answer": {"type": "string"},
                                                                          "state": {"type": "string"}}}}]
JSON_TEMPLATE = [{"intent_code": "LOAN", "state_code": "START", "output_format": "JSON", "system_prompt": "FAQ",
                  "user_prompt": "{{user_input}}"}]
DONE_RULE = [{"intent_code": "LOAN", "state_code": "DONE", "rule_type": "EXACT", "match_pattern": "never",
              "action": "SET_INPUT_PARAM", "action_value": "x"}]


@pytest.mark.parametrize(("reply", "edges", "final_state", "stage"), [
    ({"answer": "ok", "state": "DONE"}, None, "DONE", "RESPONSE_INTENT_STATE_APPLIED"),
    ({"answer": "ok", "state": "NOWHERE"}, None, "START", "RESPONSE_INTENT_STATE_REJECTED"),
    ({"answer": "ok", "state": "DONE"}, [{"intent_code": "LOAN", "from_state": "START", "to_state": "START"}],
     "START", "RESPONSE_INTENT_STATE_REJECTED"),
])
async def test_json_replies_set_state_only_when_known_and_allowed(db_url: str, reply: dict, edges: Any,
                                                                  final_state: str, stage: str) -> None:
    data = pack(ce_response=JSON_RESPONSE, ce_prompt_template=JSON_TEMPLATE, ce_rule=DONE_RULE,
                ce_state_graph=edges or [])
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    llm = ScriptedLLM({"RESPONSE_JSON": [reply]})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan")
        assert (result.payload.type, result.payload.value) == ("JSON", reply)
        assert result.state == final_state
        assert stage in await turn_stages(engine, result.conversation_id)
        assert llm.calls_to("RESPONSE_JSON")[0].schema == JSON_RESPONSE[0]["json_schema"]


async def test_response_transformers_at_the_llm_and_final_stages(db_url: str) -> None:
    def llm_stage(payload: dict, session: dict) -> str:
        return payload["value"].upper()

    async def final_stage(payload: dict, session: dict) -> dict:
        return {"type": "TEXT", "value": payload["value"] + "!"}

    transformers = {("LOAN", "START", "LLM"): llm_stage, ("LOAN", "START", "FINAL"): final_stage}
    async with engine_on(db_url, pack(), response_transformers=transformers) as engine:
        result = await engine.aprocess("loan")
        assert result.payload.value == "LOAN STARTED!"
        history = await engine.ahistory(result.conversation_id)
        assert history[0]["assistant_output"]["value"] == "LOAN STARTED"  # FINAL runs after persistence


async def test_memory_summarises_with_the_llm_once_the_conversation_exceeds_recent_turns(db_url: str) -> None:
    memory = [{"intent_code": "LOAN", "state_code": "ANY", "recent_turns": 2, "summary_max_chars": 40,
               "system_prompt": "Summarise", "user_prompt": "Before: {{previous_summary}} Now: {{user_input}}"}]
    llm = ScriptedLLM({"MEMORY_SUMMARY": lambda call: "SUMMARY " + call.user * 3},
                      default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    async with engine_on(db_url, pack(ce_memory=memory), llm=llm) as engine:
        first = await engine.aprocess("loan")
        assert first.context["memory"]["session_summary"].startswith("intent=LOAN, state=START")
        await engine.aprocess("loan again", first.conversation_id)
        assert llm.count("MEMORY_SUMMARY") == 0
        third = await engine.aprocess("loan 3", first.conversation_id)
        assert llm.count("MEMORY_SUMMARY") == 1
        summary = third.context["memory"]["session_summary"]
        assert summary.startswith("SUMMARY Before: intent=LOAN") and len(summary) == 40
        events = await turn_events(engine, first.conversation_id)
        assert payload_of(events, "MEMORY_UPDATED")["source"] == "LLM"


async def test_the_deterministic_summary_uses_the_newest_turns(db_url: str) -> None:
    async with engine_on(db_url, pack(settings={"flow": {"memory": {"recent-turns-for-summary": 2}}})) as engine:
        cid = None
        for text in ("loan one", "loan two", "loan three", "loan four"):
            result = await engine.aprocess(text, cid)
            cid = result.conversation_id
        summary = result.context["memory"]["session_summary"]
        assert "u=loan three" in summary and "u=loan two" in summary and "loan one" not in summary


async def test_the_loan_demo_runs_offline_with_its_scripted_model(db_url: str) -> None:
    sys.path.insert(0, str(EXAMPLES))
    from loan_application_scripted import LLM  # type: ignore[import-not-found]
    from loan_application_tasks import LoanTasks  # type: ignore[import-not-found]

    tasks = LoanTasks()
    LLM.reset_log()
    async with engine_on(db_url, EXAMPLES / "loan_application.yaml", llm=LLM, tasks={"loanTasks": tasks}) as engine:
        turns = [("I'd like a loan", "COLLECT"), ("my name is Ann Lee", "COLLECT"), ("25k over 3 years", "CONFIRM"),
                 ("change the amount to 30000", "CONFIRM"), ("yes", "SUBMITTED")]
        cid = None
        for text, state in turns:
            LLM.reset_log()
            result = await engine.aprocess(text, cid)
            cid = result.conversation_id
            assert result.state == state, (text, result.state, result.text)
            if text == "yes":
                assert LLM.count() == 0
            if text.startswith("change"):
                assert LLM.sites() == ["DIALOGUE_ACT"]
        assert result.text == "Submitted! Your application number is LN-1001."
        assert tasks.submitted == [{"customerName": "Ann Lee", "amount": 30000, "termMonths": 36}]
