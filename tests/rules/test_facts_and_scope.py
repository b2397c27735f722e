"""The facts document JSON_PATH rules read (its shape is what pack authors write paths against)
and the (intent, state) scoping every configuration row uses."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog import params as pk
from convengine.rules import FactsInput, build_facts
from convengine.rules.scope import in_scope, specificity


def facts(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"conversation_id": "c-1", "intent": "ORDER", "state": "COLLECT", "context": {},
                            "params": {}}
    return build_facts(FactsInput(**{**base, **overrides}))


def test_context_fields_are_top_level_but_session_fields_win_over_them() -> None:
    doc = facts(context={"size": "L", "intent": "FORGED", "state": "FORGED", "userText": "forged"},
                user_text="a large one")
    assert doc["size"] == "L"
    assert (doc["intent"], doc["state"], doc["userText"]) == ("ORDER", "COLLECT", "a large one")
    assert doc["context"]["intent"] == "FORGED"  # the context itself is kept whole under `context`


def test_params_schema_and_context_have_their_own_keys() -> None:
    doc = facts(context={"size": "L"}, params={"vip": True}, schema_json={"size": "L"})
    assert doc["inputParams"] == {"vip": True} and doc["schemaJson"] == {"size": "L"}
    assert doc["context"] == {"size": "L"} and "vip" not in doc  # params are not flattened


def test_session_fields_summarise_slots_locks_clarifications_and_the_last_llm_call() -> None:
    context = {"pending_clarification": {"question": "Bill or loan?"}, "intent_lock": {"locked": True,
               "reason": "SCHEMA_INCOMPLETE"}, "container_data": {"crm": {"tier": "gold"}}}
    schema = {"complete": False, "has_any": True, "missing": ["crust"], "options": {"crust": ["thin", "thick"]}}
    doc = facts(context=context, schema_facts=schema, last_llm={"stage": "SCHEMA_EXTRACTION", "output": {"a": 1}},
                params={pk.POST_INTENT_RULE: True, pk.RULE_EXECUTION_SOURCE: "RulesStep"})
    assert doc["schemaComplete"] is False and doc["hasAnySchemaValue"] is True
    assert doc["missingRequiredFields"] == ["crust"] and doc["missingFieldOptions"] == {"crust": ["thin", "thick"]}
    assert (doc["intentLocked"], doc["intentLockReason"]) == (True, "SCHEMA_INCOMPLETE")
    assert doc["hasContainerData"] is True and doc["containerData"] == {"crm": {"tier": "gold"}}
    assert doc["pendingClarificationQuestion"] == "Bill or loan?"
    assert (doc["lastLlmStage"], doc["lastLlmOutput"]) == ("SCHEMA_EXTRACTION", {"a": 1})
    assert doc["postIntentRule"] is True and doc["ruleExecutionSource"] == "RulesStep"


def test_a_fresh_conversation_has_safe_defaults() -> None:
    doc = facts(user_text="hi")
    assert doc["schemaComplete"] is False and doc["hasAnySchemaValue"] is False
    assert doc["missingRequiredFields"] == [] and doc["intentLocked"] is False
    assert doc["pendingClarificationQuestion"] is None and doc["hasContainerData"] is False
    assert "payload" not in doc  # no response yet


def test_resolved_input_is_the_standalone_query_when_there_is_one() -> None:
    assert facts(user_text="make it two")["resolvedUserInput"] == "make it two"
    rewritten = facts(user_text="make it two", standalone_query="order two pizzas")
    assert (rewritten["resolvedUserInput"], rewritten["standaloneQuery"]) == ("order two pizzas", "order two pizzas")


@pytest.mark.parametrize(("payload", "fact"), [
    ({"type": "TEXT", "value": "Done"}, {"text": "Done"}),
    ({"type": "JSON", "value": {"status": "ok"}}, {"status": "ok"}),
    ({"type": "JSON", "value": [1, 2]}, [1, 2]),
    ({"type": "JSON", "value": "not structured"}, {"text": "not structured"}),
])
def test_the_payload_fact_is_json_as_is_and_text_under_text(payload: dict[str, Any], fact: Any) -> None:
    assert facts(payload=payload)["payload"] == fact


@pytest.mark.parametrize(("row", "applies", "rank"), [
    (("ORDER", "COLLECT"), True, 3),
    (("ORDER", "ANY"), True, 2),
    (("ORDER", None), True, 2),
    (("ANY", "COLLECT"), True, 1),
    ((None, "COLLECT"), True, 1),
    (("ANY", "ANY"), True, 0),
    ((None, None), True, 0),
    (("BILLING", "COLLECT"), False, None),
    (("ORDER", "CONFIRM"), False, None),
    (("order", "COLLECT"), False, None),  # codes are compared as stored (the loader upper-cases them)
])
def test_a_row_applies_when_each_scope_is_equal_or_any_and_exact_scopes_rank_first(
        row: tuple[str | None, str | None], applies: bool, rank: int | None) -> None:
    assert in_scope(*row, "ORDER", "COLLECT") is applies
    if rank is not None:
        assert specificity(*row, "ORDER", "COLLECT") == rank
