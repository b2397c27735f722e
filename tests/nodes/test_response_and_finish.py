"""response_resolution, derived responses, knowledge_fallback's conditions, memory and the turn's end
(persist_conversation, pipeline_end_guard): what the user gets back and what the conversation keeps."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import names
from convengine.catalog.errors import ConvEngineError, ErrorCode, InvalidInputError, StepError
from convengine.config.records import PromptTemplateRecord, ResponseRecord
from convengine.llm import ScriptedLLM
from convengine.nodes.common import Step
from convengine.nodes.derived import template_score
from convengine.nodes.response import score, text_payload
from tests.helpers import engine_on, pack, payload_of, turn_events

# --- which response row ----------------------------------------------------------------------------


def row(intent: str | None, state: str, priority: int = 100, enabled: bool = True) -> ResponseRecord:
    return ResponseRecord(response_id=1, intent_code=intent, state_code=state, priority=priority, enabled=enabled)


def test_an_exact_state_outranks_an_intent_match_and_a_lower_priority_wins_between_equals() -> None:
    exact_both = score(row("LOAN", "START"), "LOAN", "START")
    exact_state_no_intent = score(row(None, "START"), "LOAN", "START")
    intent_any_state = score(row("LOAN", "ANY"), "LOAN", "START")
    global_any = score(row(None, "ANY"), "LOAN", "START")
    assert exact_both is not None and exact_state_no_intent is not None
    assert intent_any_state is not None and global_any is not None
    assert exact_both > exact_state_no_intent > intent_any_state > global_any
    assert score(row("LOAN", "START", priority=1), "LOAN", "START") > exact_both


@pytest.mark.parametrize("candidate", [row("BILLING", "START"), row("LOAN", "CONFIRM"), row(None, "IDLE"),
                                       row("LOAN", "START", enabled=False)])
def test_rows_of_another_intent_or_state_or_disabled_are_out(candidate: ResponseRecord) -> None:
    assert score(candidate, "LOAN", "START") is None


@pytest.mark.parametrize(("text", "payload"), [
    ('{"a": 1}', {"type": "JSON", "value": {"a": 1}}),
    ("[1, 2]", {"type": "JSON", "value": [1, 2]}),
    ("42", {"type": "JSON_TEXT", "value": "42"}),
    ("not json", {"type": "JSON_TEXT", "value": "not json"}),
])
def test_a_json_exact_response_is_json_only_when_it_is_an_object_or_array(text: str, payload: dict[str, Any]) -> None:
    json_row = ResponseRecord(response_id=1, state_code="ANY", output_format="JSON")
    assert text_payload(json_row, text) == payload
    assert text_payload(row(None, "ANY"), text) == {"type": "TEXT", "value": text}


async def test_a_missing_response_names_the_intent_and_state_and_changes_nothing(db_url: str) -> None:
    data = pack()
    data["ce_response"] = [r for r in data["ce_response"] if r.get("intent_code") == "GREETING"]
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("hello")
        with pytest.raises(ConvEngineError, match="intent=LOAN, state=START") as info:
            await engine.aprocess("loan", first.conversation_id)
        assert info.value.code == ErrorCode.RESPONSE_MAPPING_NOT_FOUND
        state = await engine.astate(first.conversation_id)
        events = await engine.aaudit(first.conversation_id)
    assert (state["intent"], state["state"], state["turn"]) == ("GREETING", "IDLE", 1)
    assert payload_of(events, "RESPONSE_MAPPING_NOT_FOUND") == {"intent": "LOAN", "state": "START"}


# --- derived responses -------------------------------------------------------------------------------


def prompt(intent: str | None, state: str | None) -> PromptTemplateRecord:
    return PromptTemplateRecord(template_id=1, intent_code=intent, state_code=state, output_format="TEXT")


def test_a_derived_response_prefers_the_template_of_its_own_intent_then_state() -> None:
    ranked = [template_score(prompt(i, s), "LOAN", "START") for i, s in
              (("LOAN", "START"), ("LOAN", "ANY"), ("LOAN", None), (None, "START"), (None, "ANY"))]
    assert ranked[0] > ranked[1] == ranked[2] > ranked[3] > ranked[4]
    assert template_score(prompt("BILLING", "START"), "LOAN", "START") is None
    assert template_score(prompt("LOAN", "CONFIRM"), "LOAN", "START") is None


DERIVED = [{"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "TEXT",
            "derivation_hint": "Mention {{intent}}.", "priority": 1}]


async def test_a_derived_response_asks_the_model_with_the_best_template_and_the_hint(sqlite_db_url: str) -> None:
    templates = [{"template_id": 1, "intent_code": "LOAN", "state_code": "ANY", "output_format": "TEXT",
                  "system_prompt": "generic loan", "user_prompt": "U1 {{user_input}}"},
                 {"template_id": 2, "intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
                  "system_prompt": "start of a loan", "user_prompt": "U2 {{user_input}}"},
                 {"template_id": 3, "intent_code": "LOAN", "state_code": "START", "output_format": "JSON",
                  "system_prompt": "json", "user_prompt": "-"}]
    llm = ScriptedLLM({"RESPONSE_TEXT": ["  Here is your loan.  "]})
    async with engine_on(sqlite_db_url, pack(ce_response=DERIVED, ce_prompt_template=templates), llm=llm) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
    call = llm.calls_to("RESPONSE_TEXT")[0]
    assert (call.system, call.user) == ("start of a loan", "U2 loan\n\nMention LOAN.")
    assert (result.payload.type, result.payload.value) == ("TEXT", "Here is your loan.")
    assert payload_of(events, "RESOLVE_RESPONSE_SELECTED")["templateId"] == 2


async def test_a_derived_response_without_a_template_of_its_format_fails_naming_the_row(sqlite_db_url: str) -> None:
    templates = [{"template_id": 3, "intent_code": "LOAN", "state_code": "START", "output_format": "JSON",
                  "system_prompt": "json", "user_prompt": "-"}]
    async with engine_on(sqlite_db_url, pack(ce_response=DERIVED, ce_prompt_template=templates),
                         llm=ScriptedLLM()) as engine:
        with pytest.raises(ConvEngineError, match="no enabled ce_prompt_template has output_format=TEXT") as info:
            await engine.aprocess("loan")
    assert info.value.code == ErrorCode.NO_RESPONSE_CONFIGURED


async def test_a_transformer_may_return_a_bare_value_or_nothing(sqlite_db_url: str) -> None:
    transformers = {("LOAN", "START", "LLM"): lambda payload, session: f"[{session['intent']}] {payload['value']}",
                    ("GREETING", "IDLE", "LLM"): lambda payload, session: None}
    async with engine_on(sqlite_db_url, pack(), response_transformers=transformers) as engine:
        loan = await engine.aprocess("loan")
        hello = await engine.aprocess("hello")
    assert (loan.payload.type, loan.payload.value) == ("TEXT", "[LOAN] Loan started")
    assert hello.payload.value == "Hello there"  # None keeps the payload


# --- knowledge_fallback: when it is asked ---------------------------------------------------------------

KNOWLEDGE_ON = {"knowledge": {"fallback": {"enabled": True}}}


async def test_the_knowledge_fallback_runs_only_when_no_intent_matched(db_url: str) -> None:
    async with engine_on(db_url, pack(settings=KNOWLEDGE_ON)) as engine:
        loan = await engine.aprocess("loan")
        yes = await engine.aprocess("yes", loan.conversation_id)
        unmatched = await engine.aprocess("purple elephants", loan.conversation_id)
        turns = [await turn_events(engine, loan.conversation_id, i) for i in range(3)]
    reasons = [{e.payload["step"]: e.payload["reason"] for e in t if e.stage == "STEP_SKIPPED"}
               .get(names.KNOWLEDGE_FALLBACK) for t in turns]
    assert reasons == ["INTENT_RESOLVED", "ANSWER_TO_A_QUESTION", None]
    no_match = payload_of(turns[2], "KNOWLEDGE_FALLBACK_NO_MATCH")
    assert (no_match["query"], no_match["candidates"]) == ("purple elephants", [])
    assert (unmatched.intent, unmatched.payload.value, yes.intent) == ("LOAN", "Loan started", "LOAN")


async def test_the_knowledge_fallback_is_off_unless_enabled(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack()) as engine:
        result = await engine.aprocess("purple elephants")
        skipped = {e.payload["step"]: e.payload["reason"]
                   for e in await turn_events(engine, result.conversation_id) if e.stage == "STEP_SKIPPED"}
    assert skipped[names.KNOWLEDGE_FALLBACK] == "KNOWLEDGE_FALLBACK_DISABLED"


# --- memory -----------------------------------------------------------------------------------------


async def test_memory_off_keeps_no_summary(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack(settings={"flow": {"memory": {"enabled": False}}})) as engine:
        result = await engine.aprocess("loan")
        events = await turn_events(engine, result.conversation_id)
    assert "memory" not in result.context
    assert payload_of(events, "MEMORY_SKIPPED") == {"reason": "MEMORY_DISABLED"}


async def test_the_built_in_summary_is_capped_by_the_memory_row_until_the_model_takes_over(db_url: str) -> None:
    memory = [{"intent_code": "LOAN", "state_code": "ANY", "recent_turns": 5, "summary_max_chars": 30},
              {"intent_code": "GREETING", "state_code": "ANY", "recent_turns": 1, "summary_max_chars": 200}]
    llm = ScriptedLLM({"MEMORY_SUMMARY": ["  the user   said\n hello   twice  "]})
    async with engine_on(db_url, pack(ce_memory=memory), llm=llm) as engine:
        loan = await engine.aprocess("loan")
        hello = await engine.aprocess("hello")
        again = await engine.aprocess("hello", hello.conversation_id)
    assert len(loan.context["memory"]["session_summary"]) == 30  # the LOAN row's limit, built in
    assert loan.context["memory"]["session_summary"].startswith("intent=LOAN")
    assert hello.context["memory"]["session_summary"].startswith("intent=GREETING")  # no turn before: built in
    assert again.context["memory"]["session_summary"] == "the user said hello twice"
    assert llm.count("MEMORY_SUMMARY") == 1


# --- the turn's end -----------------------------------------------------------------------------------


async def test_the_prompt_history_keeps_only_the_last_max_turns(db_url: str) -> None:
    data = pack(settings={"flow": {"conversation-history": {"max-turns": 2}}})
    async with engine_on(db_url, data) as engine:
        cid = None
        for text in ("hello", "loan one", "loan two"):
            cid = (await engine.aprocess(text, cid)).conversation_id
        state = await engine.astate(cid)
        history = await engine.ahistory(cid)
    assert [(t["user"], t["assistant"]) for t in state["recent_turns"]] == [("loan one", "Loan started"),
                                                                            ("loan two", "Loan started")]
    assert len(history) == 3  # the stored history is complete


async def test_params_that_would_persist_too_large_are_refused_and_nothing_is_kept(db_url: str) -> None:
    data = pack(settings={"api": {"max-persisted-params-bytes": 1024}})
    async with engine_on(db_url, data) as engine:
        first = await engine.aprocess("hello", input_params={"note": "short"})
        with pytest.raises(InvalidInputError, match="api.max_persisted_params_bytes"):
            await engine.aprocess("loan", first.conversation_id, input_params={"blob": "x" * 2000})
        state = await engine.astate(first.conversation_id)
    assert state["input_params"] == {"note": "short"} and state["intent"] == "GREETING"


async def test_a_turn_without_a_response_payload_fails_clearly(sqlite_db_url: str) -> None:
    steps = [Step("drop_payload", lambda turn: turn.set("payload", None), after=names.RESPONSE_RESOLUTION)]
    async with engine_on(sqlite_db_url, pack(), steps=steps) as engine:
        with pytest.raises(StepError, match="no response payload") as info:
            await engine.aprocess("hello")
    assert info.value.code == ErrorCode.PIPELINE_NO_RESPONSE_PAYLOAD


async def test_engine_return_lists_what_the_turn_changed_in_the_context_but_no_secret(db_url: str) -> None:
    def remember(turn: Any) -> None:
        for key, value in (turn.read_params().get("set") or {}).items():
            if value is None:
                turn.context.pop(key, None)
            else:
                turn.context[key] = value

    steps = [Step("remember", remember, before=names.RULES)]
    data = pack(settings={"conversation-memory": {"secret": ["pin"]}, "flow": {"memory": {"enabled": False}}})
    async with engine_on(db_url, data, steps=steps) as engine:
        first = await engine.aprocess("hello", input_params={"set": {"city": "Oslo", "pin": "1234", "tmp": 1}})
        second = await engine.aprocess("hello", first.conversation_id,
                                       input_params={"set": {"city": "Bergen", "tmp": None}})
        third = await engine.aprocess("hello", first.conversation_id)
        returns = [payload_of(await turn_events(engine, first.conversation_id, i), "ENGINE_RETURN") for i in range(3)]
    assert returns[0]["contextChanges"] == {"added": {"city": "Oslo", "tmp": 1}}  # a secret is never kept
    assert "1234" not in str(returns)
    assert returns[1]["contextChanges"]["changed"]["city"] == {"before": "Oslo", "after": "Bergen"}
    assert returns[1]["contextChanges"]["removed"] == ["tmp"]
    assert "contextChanges" not in returns[2]  # nothing changed
    assert (returns[2]["intent"], returns[2]["status"], returns[2]["payload"]["value"]) == ("GREETING", "RUNNING",
                                                                                            "Hello there")
    assert third.context == {"city": "Bergen"} and second.turn == 2
