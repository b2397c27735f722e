"""JSONPath as rules use it: paths are refused at load with the reason, a root filter tests the
document itself, one boolean found decides, evaluation errors are no match, and every regex in a
path runs on RE2. (The existence/null matrix is in docs/jsonpath.md, checked by tests/test_docs.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from convengine.rules import compile_jsonpath
from convengine.rules.engine import match_context_json_path, match_json_path
from tests.rules.fake_session import FakeSession, make_rule

DOC: dict[str, Any] = {"userText": "Two Pizzas please", "qty": 5, "done": False, "ready": True, "note": None,
                       "items": [{"sku": "A", "price": 3}, {"sku": "B", "price": 12}, {"sku": "C", "price": 30}]}


@pytest.mark.parametrize(("source", "reason"), [
    ("", "JSONPath must not be blank"),
    ("   ", "JSONPath must not be blank"),
    ("inputParams.size", "JSONPath must start with '$', got 'inputParams.size'"),
    ("@.size", "must start with '$'"),
    ("$.items[", "invalid JSONPath '$.items['"),
    ("$[?(@.qty == )]", "invalid JSONPath '$[?(@.qty == )]'"),
    ("$[?(@.userText =~ 'pi(?=zza)')]", "invalid JSONPath regex: 'pi(?=zza)' needs a backtracking regex engine"),
    ("$.userText.`sub(/(?<=T)wo/, X)`", "invalid JSONPath regex: '(?<=T)wo' needs a backtracking regex engine"),
])
def test_a_bad_path_is_refused_naming_the_problem(source: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        compile_jsonpath(source)
    assert reason in str(info.value)


@pytest.mark.parametrize(("source", "found", "matches"), [
    ("$.qty", [5], True),
    ("$.ready", [True], True),
    ("$.done", [False], False),  # one boolean found: it decides
    ("$.note", [None], True),  # a null was found: something was found
    ("$.nothing", [], False),
    ("$.items[?(@.price > 10)].sku", ["B", "C"], True),
    ("$.items[?(@.price > 100)].sku", [], False),
    ("$.items[*].price", [3, 12, 30], True),
    ("$.items[0].sku", ["A"], True),
    ("$.userText.`sub(/Two/, 2)`", ["2 Pizzas please"], True),
])
def test_what_a_path_finds_and_whether_that_matches(source: str, found: list[Any], matches: bool) -> None:
    path = compile_jsonpath(f"  {source} ")  # surrounding blanks are trimmed
    assert path.find(DOC) == found
    assert path.matches(DOC) is matches


@pytest.mark.parametrize(("source", "matches"), [
    ("$[?(@.qty > 3)]", True),
    ("$[?(@.qty > 3 && @.ready == true)]", True),
    ("$[?(@.qty > 30 || @.done == false)]", True),
    ("$[?(@.qty > 30 || @.done == true)]", False),
    ("$[?(@.userText > 3)]", False),  # comparing text with a number fails to evaluate: no match
    ("$[?(@.userText =~ 'pizza')]", False),  # =~ is case-sensitive
    ("$[?(@.userText =~ '(?i)pizza')]", True),
    ("$[?(@.userText =~ '^Two')]", True),
])
def test_a_root_filter_tests_the_document_itself(source: str, matches: bool) -> None:
    assert compile_jsonpath(source).matches(DOC) is matches


def test_a_root_filter_on_a_list_filters_its_elements_and_on_a_scalar_finds_nothing() -> None:
    path = compile_jsonpath("$[?(@.price > 10)]")
    assert [item["sku"] for item in path.find(DOC["items"])] == ["B", "C"]
    assert path.find("just text") == [] and path.matches(None) is False


def test_paths_compare_by_their_source() -> None:
    assert compile_jsonpath("$.a") == compile_jsonpath(" $.a ")
    assert compile_jsonpath("$.a") != compile_jsonpath("$.b")
    assert len({compile_jsonpath("$.a"), compile_jsonpath("$.a")}) == 1


def test_a_regex_in_a_path_runs_in_linear_time_on_hostile_text() -> None:
    path = compile_jsonpath("$[?(@.userText =~ '(a|aa)+$')]")
    assert path.matches({"userText": "a" * 50_000 + "b"}) is False  # a backtracking engine would never finish
    assert path.matches({"userText": "b" + "a" * 50_000}) is True


@pytest.mark.parametrize(("value", "matches"), [("large", True), (False, True), (0, True), ("", True),
                                                (None, False), ("<missing>", False)])
def test_context_json_path_matches_any_value_that_is_not_null(value: Any, matches: bool) -> None:
    context = {} if value == "<missing>" else {"size": value}
    session = FakeSession(context=context, params={"size": "from params"})
    rule = make_rule("X", kind="CONTEXT_JSON_PATH", match="$.size")
    assert match_context_json_path(rule, session) is matches


def test_context_json_path_sees_the_context_only_and_json_path_sees_the_whole_facts() -> None:
    session = FakeSession("hi", params={"vip": True}, context={"customer": {"tier": "gold"}})
    in_context = make_rule("X", kind="CONTEXT_JSON_PATH", match="$.customer.tier")
    params_from_context = make_rule("X", kind="CONTEXT_JSON_PATH", match="$.inputParams.vip")
    facts = make_rule("X", kind="JSON_PATH", match="$[?(@.inputParams.vip == true && @.customer.tier == 'gold' "
                                                    "&& @.context.customer.tier == 'gold' && @.userText == 'hi')]")
    assert match_context_json_path(in_context, session) is True
    assert match_context_json_path(params_from_context, session) is False
    assert match_json_path(facts, session) is True
    session.params["vip"] = False
    assert match_json_path(facts, session) is False


@pytest.mark.parametrize(("path", "reaches"), [
    ("$.memory.current.intent", {"memory"}),
    ("$[?(@.userInfo.userId == 'u1')]", {"userInfo"}),
    ("$['properties']['tier']", {"properties"}),
    ("$.*", {"memory", "userInfo", "properties", "conversationInfo"}),
    ("$..userId", {"memory", "userInfo", "properties", "conversationInfo"}),
    ("$.intent", set()),
])
def test_a_path_builds_only_the_namespaces_it_can_reach(path: str, reaches: set[str]) -> None:
    from convengine.rules.jsonpath import can_reach

    names = {"memory", "userInfo", "properties", "conversationInfo"}
    assert {n for n in names if can_reach(path, n)} == reaches
