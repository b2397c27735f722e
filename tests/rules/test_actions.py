"""Rule actions one by one, as a pack author writes their action_value: the formats
SET_INPUT_PARAM and the CLEAR_* actions read, capture-group substitution, SET_JSON's defaults,
SET_DIALOGUE_ACT's checks, the GET_* copies and SET_TASK's failure handling."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from convengine._internal.textmatch import compile_regex
from convengine.catalog.errors import ConfigValidationError, ErrorCode, RuleError
from convengine.config_loader import validate_pack
from convengine.rules import BUILTIN_ACTIONS, ActionEnv, parse_input_params
from convengine.rules.actions import parse_names, substitute_groups
from tests.config_loader.test_validation import BASE
from tests.rules.fake_session import FakeSession, Recorder, make_rule


def apply(action: str, value: str | None, session: FakeSession, *, kind: str = "EXACT", match: str = "ANY",
          env: ActionEnv | None = None) -> Any:
    rule = make_rule(action, value, kind=kind, match=match)
    return BUILTIN_ACTIONS[action](rule, session, env or ActionEnv(None, Recorder()))


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"size": "large", "qty": 2}', {"size": "large", "qty": 2}),
    ('  {"key": "size", "value": {"w": 3}}  ', {"size": {"w": 3}}),
    ('{"key": "k", "value": 1, "other": 2}', {"key": "k", "value": 1, "other": 2}),  # not the key/value form
    ('[{"key": "a", "value": 1}, {"key": "b"}]', {"a": 1, "b": None}),
    ("vip:true", {"vip": True}),
    ("vip: FALSE", {"vip": False}),
    ("note:null", {"note": None}),
    ("count:-3", {"count": -3}),
    ("ratio:0.25", {"ratio": 0.25}),
    ("ratio:1e3", {"ratio": 1000.0}),
    ("code:'007'", {"code": "007"}),  # quoted: text, leading zeros kept
    ('code:"42"', {"code": "42"}),
    ("url:https://example.org/a:b", {"url": "https://example.org/a:b"}),  # split at the first colon only
    ("reason: running late ", {"reason": "running late"}),
    ("flagged", {"flagged": True}),
])
def test_set_input_param_value_formats(raw: str, expected: dict[str, Any]) -> None:
    parsed = parse_input_params(raw)
    assert parsed == expected
    assert [type(v) for v in parsed.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("raw", ['{"size": ', "[{'key': 'a'}]", '[{"value": 1}]'])
def test_malformed_set_input_param_values_raise(raw: str) -> None:
    with pytest.raises((ValueError, KeyError)):
        parse_input_params(raw)


@pytest.mark.parametrize(("raw", "names"), [
    ("size", ["size"]), (" size ,  crust,, ", ["size", "crust"]), ('["size", " crust ", ""]', ["size", "crust"]),
    ("", []),
])
def test_clear_actions_read_a_name_a_list_or_json(raw: str, names: list[str]) -> None:
    assert parse_names(raw) == names


def test_capture_groups_fill_values_numbered_named_nested_and_absent() -> None:
    match = compile_regex(r"(?P<qty>\d+) (large|small)( extra)?").search("2 LARGE pizzas")
    value = {"qty": "${qty}", "size": "$2", "both": "$1 x $2!", "extra": "$3", "in": ["$2", {"deep": "$1"}],
             "text": "costs $5", "number": 7, "missing_name": "${nope}"}
    assert substitute_groups(value, match) == {
        "qty": "2", "size": "LARGE", "both": "2 x LARGE!", "extra": None, "in": ["LARGE", {"deep": "2"}],
        "text": "costs ", "number": 7, "missing_name": None}
    assert substitute_groups(value, None) == value  # no REGEX match: values as written


def test_set_input_param_from_a_regex_rule_takes_its_groups() -> None:
    session = FakeSession("order 3 please")
    payload = apply("SET_INPUT_PARAM", '{"qty": "$1", "note": "asked for $1"}', session, kind="REGEX",
                    match=r"(\d+)")
    assert session.kept == {"qty": "3", "note": "asked for 3"}
    assert payload["params"] == session.kept
    exact = FakeSession("order 3 please")
    apply("SET_INPUT_PARAM", '{"qty": "$1"}', exact)  # an EXACT rule has no groups: "$1" stays text
    assert exact.kept == {"qty": "$1"}


def test_set_input_param_without_a_value_is_an_invalid_rule_action() -> None:
    with pytest.raises(RuleError) as info:
        apply("SET_INPUT_PARAM", "   ", FakeSession())
    assert info.value.code is ErrorCode.INVALID_RULE_ACTION and "SET_INPUT_PARAM needs a value" in info.value.message


def test_clear_input_param_and_clear_context_report_what_was_actually_there() -> None:
    session = FakeSession(params={"size": "L", "crust": None, "keep": 1}, context={"order_id": 7, "name": "Jo"})
    cleared = apply("CLEAR_INPUT_PARAM", "size, crust, never_set", session)
    assert cleared["cleared"] == ["size", "crust"] and cleared["params"] == ["size", "crust", "never_set"]
    assert session.params == {"keep": 1}
    context = apply("CLEAR_CONTEXT", '["order_id", "ghost"]', session)
    assert context["cleared"] == ["order_id"] and session.context == {"name": "Jo"}


def test_set_json_copies_the_first_value_found_and_defaults_its_name_and_path() -> None:
    session = FakeSession(context={"items": [{"sku": "A"}, {"sku": "B"}]}, params={"old": 1})
    found = apply("SET_JSON", "first_sku: $.context.items[*].sku", session)
    assert session.kept == {"first_sku": "A"}
    assert found == {"ruleId": found["ruleId"], "param": "first_sku", "path": "$.context.items[*].sku",
                     "matched": True, "value": "A"}
    apply("SET_JSON", ":$.state", session)  # a blank name is llm_json
    assert session.kept["llm_json"] == "START"
    whole = FakeSession("hi")
    apply("SET_JSON", "facts:", whole)  # a blank path is the whole facts document
    assert whole.kept["facts"]["userText"] == "hi" and whole.kept["facts"]["inputParams"] == {}
    missing = FakeSession(params={"target": "kept"})
    assert apply("SET_JSON", "target:$.context.nowhere", missing)["matched"] is False
    assert missing.params["target"] == "kept" and missing.kept == {}


@pytest.mark.parametrize(("value", "expected"), [
    ("affirm", {"act": "AFFIRM", "confidence": None, "source": "RULE", "query": None}),
    ('{"dialogueAct": "edit", "confidence": "0.7", "source": "MY_RULE", "standaloneQuery": "change size"}',
     {"act": "EDIT", "confidence": 0.7, "source": "MY_RULE", "query": "change size"}),
    ('{"dialogue_act": "RESET", "dialogue_act_source": "S", "standalone_query": "q"}',
     {"act": "RESET", "confidence": None, "source": "S", "query": "q"}),
])
def test_set_dialogue_act_accepts_a_bare_act_or_json(value: str, expected: dict[str, Any]) -> None:
    session = FakeSession()
    apply("SET_DIALOGUE_ACT", value, session)
    assert session.acts == [expected]


@pytest.mark.parametrize(("value", "message"), [("", "SET_DIALOGUE_ACT needs an act"),
                                                ("SHOUT", "unknown dialogue act 'SHOUT'"),
                                                ('{"confidence": 1}', "unknown dialogue act ''")])
def test_set_dialogue_act_refuses_what_is_not_an_act(value: str, message: str) -> None:
    session = FakeSession()
    with pytest.raises(RuleError) as info:
        apply("SET_DIALOGUE_ACT", value, session)
    assert info.value.code is ErrorCode.INVALID_RULE_ACTION and message in info.value.message
    assert session.acts == []


def test_get_actions_copy_context_slots_and_session_into_params() -> None:
    session = FakeSession("hello", context={"size": "L", "crust": "thin", "note": "x"})
    apply("GET_CONTEXT", None, session)
    apply("GET_SCHEMA_JSON", "slots", session)
    apply("GET_SESSION", "", session)
    assert session.kept["context"] == {"size": "L", "crust": "thin", "note": "x"}
    assert session.kept["slots"] == {"size": "L", "crust": "thin"}
    assert (session.kept["session"]["intent"], session.kept["session"]["userText"]) == ("LOAN", "hello")
    session.context["size"] = "S"
    assert session.kept["context"]["size"] == "L"  # a copy, not the live context


async def test_set_task_runs_each_method_in_order_and_records_failures_without_raising() -> None:
    calls: list[tuple[str, str]] = []

    async def runner(bean: str, method: str, session: Any, rule: Any) -> None:
        calls.append((bean, method))
        if method == "charge":
            raise RuntimeError("card declined")

    emitted = Recorder()
    result = await apply("SET_TASK", "billing: check , charge,notify", FakeSession(), env=ActionEnv(runner, emitted))
    assert calls == [("billing", "check"), ("billing", "charge"), ("billing", "notify")]
    assert [(r["method"], r["status"]) for r in result["results"]] == [("check", "OK"), ("charge", "FAILED"),
                                                                       ("notify", "OK")]
    failed = emitted.payloads("SET_TASK_FAILED")
    assert [(f["taskMethod"], f["errorType"], f["errorMessage"]) for f in failed] == [
        ("charge", "RuntimeError", "card declined")]
    json.dumps(result)  # what the audit stores


async def test_set_task_without_a_task_runner_reports_the_task_missing() -> None:
    emitted = Recorder()
    result = await apply("SET_TASK", "crm:tag", FakeSession(), env=ActionEnv(None, emitted))
    assert result["results"] == [{"method": "tag", "status": "FAILED", "error": "no task registered for crm:tag"}]
    assert emitted.payloads("SET_TASK_FAILED")[0]["errorType"] == "ConvEngineError"


@pytest.mark.parametrize("value", ['[{"value": 1}]', "[1, 2]"])
def test_a_set_input_param_list_without_keys_is_refused_when_the_pack_loads(value: str) -> None:
    data = copy.deepcopy(BASE)
    data["ce_rule"].append({"rule_id": 5, "intent_code": "LOAN", "state_code": "COLLECT", "rule_type": "EXACT",
                            "match_pattern": "ANY", "action": "SET_INPUT_PARAM", "action_value": value})
    with pytest.raises(ConfigValidationError) as info:
        validate_pack(data)
    assert any(str(v).startswith("ce_rule[5].action_value") for v in info.value.violations)
