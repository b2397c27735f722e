"""Numbers that are not numbers: ``nan``, ``inf``, ``1e999`` given where a number is expected.

NaN makes every comparison false, so ``session.amount > 1000 -> review`` would be skipped and the
default edge taken: a business limit bypassed by an end user. A number entity takes finite numbers
only (anything else is a failed attempt: reprompt, then escalate), an LLM reply holding one is
invalid, and an expression never computes or compares NaN or infinity silently.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from convengine import ScriptedLLM
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.rules.expr import ExpressionError, compile_expression
from tests.api.auth_support import MESSAGE
from tests.flows.packs import chain, edge, flows_pack, node
from tests.helpers import engine_on, pack, turn_stages
from tests.servers import in_process

pytestmark = pytest.mark.asyncio

NOT_NUMBERS = ["nan", "NaN", "-nan", "+NAN", "inf", "-inf", "+Infinity", "INFINITY", "-infinity", "1e999",
               "-1e999", "1,000e999"]

LIMIT_NODES = [
    node("LIMIT", "start", "start"),
    node("LIMIT", "ask", "entity", variable="amount", type="number", prompt="How much?",
         reprompts=["A number, please.", "Please type the amount in digits."], max_attempts=3),
    node("LIMIT", "check", "decision"),
    node("LIMIT", "review", "message", text="{{ session.amount }} needs a review."),
    node("LIMIT", "approved", "message", text="Approved: {{ session.amount }}."),
    node("LIMIT", "human", "handoff", text="Let me connect you with an officer."),
    node("LIMIT", "done", "end"),
]
LIMIT_EDGES = [*chain("LIMIT", "start", "ask", "check"),
               edge("LIMIT", "ask", "human", outcome="escalate"),
               edge("LIMIT", "check", "review", condition="session.amount > 1000", priority=1),
               edge("LIMIT", "check", "approved"),
               edge("LIMIT", "review", "done"), edge("LIMIT", "approved", "done")]


def limit_pack() -> dict[str, Any]:
    return flows_pack(nodes=LIMIT_NODES, edges=LIMIT_EDGES,
                      flows=[{"flow_code": "LIMIT", "intent_code": "LOAN", "priority": 1}])


@pytest.mark.parametrize("answer", NOT_NUMBERS)
async def test_a_number_entity_refuses_nan_and_infinity(db_url: str, answer: str) -> None:
    async with engine_on(db_url, limit_pack()) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        first = await engine.aprocess(answer, cid)
        assert first.text == "A number, please.", first.text
        assert (await engine.aprocess(answer.upper(), cid)).text == "Please type the amount in digits."
        escalated = await engine.aprocess(answer, cid)
        assert escalated.text == "Let me connect you with an officer."
        assert "FLOW_ENTITY_ESCALATED" in await turn_stages(engine, cid)


async def test_a_finite_number_still_goes_through_the_limit(db_url: str) -> None:
    async with engine_on(db_url, limit_pack()) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        assert (await engine.aprocess("5,000", cid)).text == "5000 needs a review."
        cid = (await engine.aprocess("I want a loan")).conversation_id
        assert (await engine.aprocess("250.5", cid)).text == "Approved: 250.5."


LLM_LIMIT_NODES = [dict(n) for n in LIMIT_NODES]
LLM_LIMIT_NODES[1] = node("LIMIT", "ask", "entity", variable="amount", type="number", prompt="How much?",
                          extract="llm",
                          reprompts=["A number, please.", "Please type the amount in digits."], max_attempts=3)


@pytest.mark.parametrize("reply", ['{"amount": NaN}', '{"amount": -Infinity}', '{"amount": 1e999}',
                                   {"amount": math.nan}, {"amount": "nan"}])
async def test_an_llm_cannot_extract_nan_for_a_number_entity(db_url: str, reply: Any) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [reply]}, default={"intent": None, "confidence": 0})
    data = flows_pack(nodes=LLM_LIMIT_NODES, edges=LIMIT_EDGES,
                      flows=[{"flow_code": "LIMIT", "intent_code": "LOAN", "priority": 1}])
    async with engine_on(db_url, data, llm=llm) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        answered = await engine.aprocess("a lot, not a number anyone could write", cid)
        assert llm.count("SCHEMA_EXTRACTION") == 1
        assert answered.text == "A number, please.", answered.text


SLOT_SCHEMA = {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}


def slot_pack() -> dict[str, Any]:
    data = pack(
        ce_output_schema=[{"schema_id": 5, "intent_code": "LOAN", "state_code": "ANY", "priority": 1,
                           "json_schema": SLOT_SCHEMA}],
        ce_prompt_template=[{"template_id": 31, "intent_code": "LOAN", "state_code": "START",
                             "output_format": "SCHEMA_JSON", "system_prompt": "Extract.",
                             "user_prompt": "{{user_input}}"}],
        ce_rule=[{"phase": "POST_SCHEMA_EXTRACTION", "intent_code": "LOAN", "state_code": "START",
                  "rule_type": "JSON_PATH", "match_pattern": "$[?(@.amount > 1000)]", "action": "SET_STATE",
                  "action_value": "REVIEW", "priority": 1},
                 {"phase": "POST_SCHEMA_EXTRACTION", "intent_code": "LOAN", "state_code": "START",
                  "rule_type": "JSON_PATH", "match_pattern": "$[?(@.amount <= 1000)]", "action": "SET_STATE",
                  "action_value": "APPROVED", "priority": 2}],
        ce_response=[{"intent_code": "LOAN", "state_code": "REVIEW", "exact_text": "{{amount}} needs a review."},
                     {"intent_code": "LOAN", "state_code": "APPROVED", "exact_text": "Approved: {{amount}}."}],
    )
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    return data


@pytest.mark.parametrize("reply", ['{"amount": NaN}', '{"amount": Infinity}', '{"amount": -1e999}',
                                   {"amount": math.inf}])
async def test_a_ce_output_schema_number_slot_refuses_nan_from_the_llm(db_url: str, reply: Any) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": [reply, {"amount": 5000}]},
                      default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        with pytest.raises(ConvEngineError) as refused:
            await engine.aprocess("a loan of a bottomless amount")
        assert refused.value.code is ErrorCode.LLM_INVALID_RESPONSE
        assert "not a finite number" in refused.value.message
        cid = refused.value.details["conversationId"]
        retried = await engine.aprocess("a loan of 5000", cid)
        assert retried.text == "5000 needs a review."


@pytest.mark.parametrize("source, scopes", [
    ("session.amount > 1000", {"session": {"amount": math.nan}}),
    ("session.amount <= 1000", {"session": {"amount": -math.inf}}),
    ("number(session.amount) > 1000", {"session": {"amount": "NaN"}}),
    ("number(session.amount) > 1000", {"session": {"amount": "-Infinity"}}),
    ("session.amount * 10 > 1000", {"session": {"amount": 1e308}}),
    ("session.amount - session.amount > 0", {"session": {"amount": 1e308 * 10}}),
    ("-session.amount < 0", {"session": {"amount": "inf"}}),
])
async def test_expressions_never_compute_or_compare_nan_silently(source: str, scopes: dict[str, Any]) -> None:
    with pytest.raises(ExpressionError, match="not a finite number"):
        compile_expression(source).evaluate(scopes)


@pytest.mark.parametrize("source", ["1e999 > 5", "session.amount > -1e999", "1j == 0"])
async def test_expressions_refuse_literals_past_the_float_range(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_expression(source)


async def test_an_expression_on_nan_fails_the_turn_clearly(db_url: str) -> None:
    """A NaN that reached the session another way (here a number param the host seeded) fails the
    decision with a clear error instead of taking the default edge."""
    nodes = [*LIMIT_NODES[:1], node("LIMIT", "ask", "entity", variable="amount", prompt="How much?",
                                    capture={"param": "amount"}), *LIMIT_NODES[2:]]
    data = flows_pack(nodes=nodes, edges=LIMIT_EDGES, flows=[{"flow_code": "LIMIT", "intent_code": "LOAN",
                                                             "priority": 1}])
    data["ce_flow_edge"] = [e if e.get("condition") is None else {**e, "condition": "number(session.amount) > 1000"}
                            for e in data["ce_flow_edge"]]
    async with engine_on(db_url, data) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        with pytest.raises(ConvEngineError, match="not a finite number"):
            await engine.aprocess("here", cid, input_params={"amount": "nan"})
        assert (await engine.aprocess("here", cid, input_params={"amount": "2000"})).text == "2000 needs a review."


async def test_http_input_params_past_the_float_range_are_refused(db_url: str) -> None:
    from convengine.api import create_app

    app = create_app(db_url, pack=limit_pack())
    async with in_process(app) as client:
        for raw in (b'{"message": "a loan", "inputParams": {"amount": 1e999}}',
                    b'{"message": "a loan", "inputParams": {"amount": NaN}}',
                    b'{"message": "a loan", "inputParams": {"amount": -Infinity}}'):
            refused = await client.post(MESSAGE, content=raw, headers={"Content-Type": "application/json"})
            assert refused.status_code == 422 and refused.json()["errorCode"] == "INVALID_INPUT", refused.text
