"""Whole numbers past the 64-bit range: the checkpoint cannot hold them (msgpack), so one reaching a
conversation's state failed the turn with an internal error (``TypeError: Integer exceeds 64-bit
range``) instead of a clear refusal; and a pack's ``set`` nodes multiplying a number by itself grew it
to millions of digits, blocking the server's event loop for minutes inside one turn.

A number entity takes whole numbers within the 64-bit range (a longer one is a failed answer),
``inputParams`` and LLM replies holding a longer one are refused (``INVALID_INPUT`` /
``LLM_INVALID_RESPONSE``), and an expression never computes one.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from convengine import ScriptedLLM
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.rules.expr import ExpressionError, compile_expression
from tests.api.auth_support import MESSAGE
from tests.flows.packs import chain, flows_pack, node
from tests.helpers import engine_on
from tests.security.test_number_attacks import limit_pack, slot_pack
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
HUGE = ["9" * 20, "-" + "9" * 25, "1" + "0" * 4000, str(2**63)]


@pytest.mark.parametrize("answer", HUGE)
async def test_a_number_entity_takes_a_number_past_64_bits_as_a_failed_answer(db_url: str, answer: str) -> None:
    async with engine_on(db_url, limit_pack()) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        first = await engine.aprocess(answer, cid)
        assert first.text == "A number, please.", first.text
        assert (await engine.aprocess("2000", cid)).text == "2000 needs a review."


async def test_the_largest_64_bit_number_still_goes_through(db_url: str) -> None:
    async with engine_on(db_url, limit_pack()) as engine:
        cid = (await engine.aprocess("I want a loan")).conversation_id
        assert (await engine.aprocess(str(2**63 - 1), cid)).text == f"{2**63 - 1} needs a review."


async def test_input_params_past_64_bits_are_invalid_input(db_url: str) -> None:
    async with engine_on(db_url, limit_pack()) as engine:
        with pytest.raises(ConvEngineError) as refused:
            await engine.aprocess("a loan", input_params={"deep": {"amount": 10**30}})
        assert refused.value.code is ErrorCode.INVALID_INPUT and "64-bit" in refused.value.message
    from convengine.api import create_app

    app = create_app(db_url, pack=limit_pack())
    async with in_process(app) as client:
        raw = b'{"message": "a loan", "inputParams": {"amount": 100000000000000000000000000000}}'
        response = await client.post(MESSAGE, content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 422 and response.json()["errorCode"] == "INVALID_INPUT", response.text


async def test_an_llm_reply_past_64_bits_is_invalid(db_url: str) -> None:
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": ['{"amount": 123456789012345678901234567890}', {"amount": 5000}]},
                      default={"dialogueAct": "ANSWER", "confidence": 0.9})
    async with engine_on(db_url, slot_pack(), llm=llm) as engine:
        with pytest.raises(ConvEngineError) as refused:
            await engine.aprocess("a loan of a bottomless amount")
        assert refused.value.code is ErrorCode.LLM_INVALID_RESPONSE, refused.value
        retried = await engine.aprocess("a loan of 5000", refused.value.details["conversationId"])
        assert retried.text == "5000 needs a review."


@pytest.mark.parametrize(("source", "scopes"), [
    ("session.x * session.x", {"session": {"x": 2**40}}),
    ("session.x + 1", {"session": {"x": 2**63 - 1}}),
    ("number(session.x)", {"session": {"x": "9" * 30}}),
    ("session.x - 1", {"session": {"x": -(2**63)}}),
])
async def test_expressions_never_compute_numbers_past_64_bits(source: str, scopes: dict[str, Any]) -> None:
    with pytest.raises(ExpressionError, match="64-bit"):
        compile_expression(source).evaluate(scopes)


async def test_set_nodes_multiplying_a_number_by_itself_fail_the_turn_quickly(db_url: str) -> None:
    power = " * ".join(["session.x"] * 30)
    sets = [node("BG", f"s{i}", "set", variable="x", expression=power) for i in range(5)]
    nodes = [node("BG", "start", "start"), node("BG", "init", "set", variable="x", expression="10"), *sets,
             node("BG", "say", "message", text="done"), node("BG", "end", "end")]
    data = flows_pack(nodes=nodes, edges=chain("BG", "start", "init", *[f"s{i}" for i in range(5)], "say", "end"),
                      flows=[{"flow_code": "BG", "intent_code": "GREETING", "priority": 1}])
    async with engine_on(db_url, data) as engine:
        started = time.monotonic()
        with pytest.raises(ConvEngineError) as failed:
            await engine.aprocess("hello")  # five squarings to the 30th power: 10^(30^5) before the fix
        assert time.monotonic() - started < 10
        assert failed.value.code is not ErrorCode.INTERNAL_ERROR and "64-bit" in failed.value.message




@pytest.mark.parametrize("answer", [{"id": 10**30}, "[" * 100_000 + "]" * 100_000])
async def test_a_service_answering_a_huge_number_or_deep_json_takes_the_error_edge(db_url: str, answer: Any) -> None:
    from tests.http_stub import http_server
    from tests.security.test_service_limits import service_flow

    with http_server(lambda path, body: (200, answer)) as stub:
        async with engine_on(db_url, service_flow(stub.url)) as engine:
            assert (await engine.aprocess("hello")).text == "Service failed."


async def test_a_python_node_leaving_a_huge_number_takes_the_error_edge(db_url: str) -> None:
    from tests.security.test_python_node_limits import python_flow

    async with engine_on(db_url, python_flow("session['leak'] = 10 ** 30")) as engine:
        assert (await engine.aprocess("hello")).text == "Script failed."
