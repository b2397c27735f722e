"""What a pack needs to run a real order flow: regex capture groups in rule actions, clearing
stored values so a second order asks again, and JSONPath existence/null checks that mean what
they say. Through Engine, on both backends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from convengine.rules.jsonpath import compile_jsonpath
from tests.helpers import engine_on, pack, payload_of, turn_events

pytestmark = pytest.mark.asyncio


def rule(action: str, value: str, *, match: str = "ANY", kind: str = "EXACT", state: str = "START",
         priority: int = 100, phase: str = "PRE_RESPONSE_RESOLUTION") -> dict[str, Any]:
    return {"phase": phase, "intent_code": "LOAN", "state_code": state, "rule_type": kind, "match_pattern": match,
            "action": action, "action_value": value, "priority": priority}


ORDER_RULES = [
    rule("SET_INPUT_PARAM", '{"size": "${size}"}', kind="REGEX", match=r"\b(?P<size>small|large)\b", priority=1),
    rule("SET_INPUT_PARAM", '{"quantity": "$1", "what": "$1 $2", "absent": "$7"}', kind="REGEX",
         match=r"(\d+) (pizzas?)", priority=2),
    rule("SET_STATE", "REVIEW", kind="JSON_PATH", match="$[?(@.inputParams.size != null)]", priority=10),
    rule("CLEAR_INPUT_PARAM", "size, quantity", match="another one", state="REVIEW", priority=1),
    rule("CLEAR_CONTEXT", '["customer"]', match="another one", state="REVIEW", priority=2),
    rule("SET_STATE", "START", match="another one", state="REVIEW", priority=3),
]
ORDER_RESPONSES = [
    {"intent_code": "LOAN", "state_code": "START", "exact_text": "Which size? [{{ customer or '' }}]", "priority": 1},
    {"intent_code": "LOAN", "state_code": "REVIEW", "exact_text": "{{quantity}} x {{size}} ({{what}}) [{{ absent or '' }}]"},
]


async def test_capture_groups_fill_params_and_clearing_asks_again(db_url: str) -> None:
    data = pack(ce_rule=ORDER_RULES, ce_response=ORDER_RESPONSES)
    async with engine_on(db_url, data) as engine:
        cid = str(uuid.uuid4())
        await engine.aseed(cid, context={"customer": "C-9"})
        first = await engine.aprocess("a loan please", cid)
        assert (first.state, first.text) == ("START", "Which size? [C-9]")  # size missing: != null does not match

        second = await engine.aprocess("2 pizzas, LARGE", cid)
        assert second.state == "REVIEW"
        assert second.text == "2 x LARGE (2 pizzas) []"  # named and numbered groups; $7 took no part
        applied = [e.payload["params"] for e in await turn_events(engine, cid) if e.stage == "SET_INPUT_PARAM"]
        assert applied == [{"size": "LARGE"}, {"quantity": "2", "what": "2 pizzas", "absent": None}]

        third = await engine.aprocess("another one", cid)
        assert (third.state, third.text) == ("START", "Which size? []")
        assert "customer" not in third.context
        cleared = payload_of(await turn_events(engine, cid), "CLEAR_INPUT_PARAM")
        assert cleared["cleared"] == ["size", "quantity"]

        fourth = await engine.aprocess("hmm", cid)  # the cleared values are not stored any more
        assert (fourth.state, fourth.text) == ("START", "Which size? []")


async def test_a_regex_without_groups_keeps_dollar_text_as_written(db_url: str) -> None:
    rules = [rule("SET_INPUT_PARAM", '{"price": "$5"}', kind="REGEX", match=r"\bcheap\b"),
             rule("SET_STATE", "REVIEW", kind="JSON_PATH", match="$[?(@.inputParams.price == null)]", priority=10)]
    responses = [{"intent_code": "LOAN", "state_code": "REVIEW", "exact_text": "price=[{{ price or '' }}]"}]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=responses)) as engine:
        result = await engine.aprocess("a cheap loan")
        # the group does not exist: the value has no value, so `== null` matches
        assert (result.state, result.text) == ("REVIEW", "price=[]")


@pytest.mark.parametrize(("path", "document", "expected"), [
    ("$[?(@.inputParams.size != null)]", {"inputParams": {}}, False),
    ("$[?(@.inputParams.size != null)]", {"inputParams": {"size": None}}, False),
    ("$[?(@.inputParams.size != null)]", {"inputParams": {"size": "L"}}, True),
    ("$[?(@.inputParams.size != null)]", {"inputParams": {"size": False}}, True),
    ("$[?(@.inputParams.size == null)]", {"inputParams": {}}, True),
    ("$[?(@.inputParams.size == null)]", {"inputParams": {"size": None}}, True),
    ("$[?(@.inputParams.size == null)]", {"inputParams": {"size": ""}}, False),
    ("$[?(@.inputParams.size)]", {"inputParams": {}}, False),
    ("$[?(@.inputParams.size)]", {"inputParams": {"size": None}}, True),
    ("$[?(!@.inputParams.size)]", {"inputParams": {}}, True),
    ("$[?(@.inputParams.a != null && @.inputParams.b == null)]", {"inputParams": {"a": 1}}, True),
    ("$[?(@.inputParams.a != null && @.inputParams.b == null)]", {"inputParams": {"a": 1, "b": 2}}, False),
])
async def test_jsonpath_existence_and_null_checks(path: str, document: dict[str, Any], expected: bool) -> None:
    assert compile_jsonpath(path).matches(document) is expected
