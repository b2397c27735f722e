"""Property-based tests of the facts document JSON_PATH rules see (ConvEngine's shape)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from convengine.rules.facts import FactsInput, build_facts, session_fields
from convengine.rules.jsonpath import compile_jsonpath
from tests.fuzz.strategies import json_objects, json_values, user_text

FUZZ = settings(max_examples=200, deadline=None)
identifiers = st.from_regex(r"[a-z][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda k: k not in {"where", "wherenot", "when", "and", "or", "not", "in", "len", "sorted", "split", "sub", "str",
                        "this", "parent", "id"})


def facts_for(context: dict[str, Any], params: dict[str, Any], text: str = "hi") -> dict[str, Any]:
    return build_facts(FactsInput("c0ffee00-0000-4000-8000-000000000000", "LOAN", "START", context, params, text))


@FUZZ
@given(context=json_objects, params=json_objects, text=user_text)
def test_the_document_is_json_and_keeps_context_params_and_session(context: dict[str, Any],
                                                                     params: dict[str, Any], text: str) -> None:
    doc = facts_for(context, params, text)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["context"] == context and doc["inputParams"] == params
    session = session_fields(FactsInput("c0ffee00-0000-4000-8000-000000000000", "LOAN", "START", context, params,
                                        text))
    for key, value in context.items():
        if key in ("context", "schemaJson", "inputParams", "payload"):
            continue  # the document's own sections
        assert doc[key] == session.get(key, value)  # session fields win over context keys
    assert (doc["intent"], doc["state"], doc["userText"]) == ("LOAN", "START", text)


@FUZZ
@given(key=identifiers, value=json_values, others=json_objects)
def test_context_and_params_values_are_reachable_by_path(key: str, value: Any, others: dict[str, Any]) -> None:
    doc = facts_for({**others, key: value}, {key: value})
    assert compile_jsonpath(f"$.context.{key}").find(doc) == [value]
    assert compile_jsonpath(f"$.inputParams.{key}").find(doc) == [value]


@FUZZ
@given(key=identifiers, value=st.sampled_from(["on", "off", "x"]) | st.integers(0, 3), probe=st.sampled_from(["on", "1"]))
def test_a_root_filter_matches_exactly_when_the_value_matches(key: str, value: Any, probe: str) -> None:
    doc = facts_for({}, {key: value})
    matcher = compile_jsonpath(f"$[?(@.inputParams.{key} == '{probe}')]")
    assert matcher.matches(doc) is (value == probe)
