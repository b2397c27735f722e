"""ScriptedLLM, the offline model tests and demos script: queues, functions and fixed replies per
call site, defaults, simulated outages and slow models, and the call log it keeps."""

from __future__ import annotations

import asyncio
import time

import pytest

from convengine.catalog.errors import ErrorCode
from convengine.llm import Delay, LlmCall, ScriptedLLM, UnscriptedCallError
from convengine.llm.scripted import reply_text, scripted


def call(site: str, user: str = "hi", **kwargs: object) -> LlmCall:
    return LlmCall(site, "system", user, None, "c-1", "LOAN", "START", **kwargs)  # type: ignore[arg-type]


async def test_a_queue_replies_in_order_then_runs_out_naming_the_call_site() -> None:
    llm = ScriptedLLM({"response_text": ["one", "two"]})  # call sites are case-insensitive
    assert [await llm.respond(call("RESPONSE_TEXT")) for _ in range(2)] == ["one", "two"]
    with pytest.raises(UnscriptedCallError) as info:
        await llm.respond(call("RESPONSE_TEXT"))
    message = info.value.message
    assert "no reply for call site RESPONSE_TEXT" in message and "conversation c-1, LOAN/START" in message
    assert info.value.code is ErrorCode.LLM_CALL_FAILED and not info.value.recoverable
    assert info.value.details == {"callSite": "RESPONSE_TEXT"}


async def test_a_function_sees_the_call_and_a_single_reply_repeats() -> None:
    llm = ScriptedLLM({"RESPONSE_TEXT": lambda c: f"you said {c.user_text!r} in {c.state}",
                       "DIALOGUE_ACT": {"dialogueAct": "AFFIRM", "confidence": 0.9}})
    assert await llm.respond(call("RESPONSE_TEXT", "a loan")) == "you said 'a loan' in START"
    first = await llm.respond(call("DIALOGUE_ACT"))
    second = await llm.respond(call("DIALOGUE_ACT"))
    assert first == second == {"dialogueAct": "AFFIRM", "confidence": 0.9}


async def test_a_queue_may_hold_functions_and_a_default_answers_everything_else() -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [lambda c: {"intent": c.user_text.upper()}]}, default=lambda c: c.call_site)
    assert await llm.respond(call("INTENT_AGENT", "loan")) == {"intent": "LOAN"}
    assert await llm.respond(call("INTENT_AGENT")) == "INTENT_AGENT"  # the queue is empty: the default
    assert await llm.respond(call("MEMORY_SUMMARY")) == "MEMORY_SUMMARY"
    assert await ScriptedLLM(default=None).respond(call("POLICY")) is None  # a None default is a default too


async def test_exceptions_simulate_outages_and_are_logged_as_calls() -> None:
    llm = ScriptedLLM({"POLICY": [ConnectionResetError("reset"), TimeoutError, "ok"]})
    with pytest.raises(ConnectionResetError, match="reset"):
        await llm.respond(call("POLICY"))
    with pytest.raises(TimeoutError):
        await llm.respond(call("POLICY"))
    assert await llm.respond(call("POLICY")) == "ok"
    assert llm.count("policy") == 3
    assert isinstance(llm.calls[0].reply, ConnectionResetError) and llm.calls[1].reply is TimeoutError


async def test_a_delay_waits_before_replying() -> None:
    llm = ScriptedLLM({"RESPONSE_TEXT": [Delay(0.2, "slow"), "fast"]})
    started = time.monotonic()
    assert await llm.respond(call("RESPONSE_TEXT")) == "slow"
    assert time.monotonic() - started >= 0.19
    with pytest.raises(asyncio.TimeoutError):  # a slow model can be cut off like a real one
        llm.add("RESPONSE_TEXT", Delay(5, "too late"))
        await llm.respond(call("RESPONSE_TEXT"))  # "fast" first
        await asyncio.wait_for(llm.respond(call("RESPONSE_TEXT")), 0.05)


async def test_the_call_log_counts_per_call_site_in_order() -> None:
    llm = ScriptedLLM(default="x")
    for site in ("DIALOGUE_ACT", "INTENT_AGENT", "DIALOGUE_ACT"):
        await llm.respond(call(site, f"to {site}"))
    assert llm.sites() == ["DIALOGUE_ACT", "INTENT_AGENT", "DIALOGUE_ACT"]
    assert (llm.count(), llm.count("DIALOGUE_ACT"), llm.count("RESPONSE_TEXT")) == (3, 2, 0)
    assert [c.user for c in llm.calls_to("dialogue_act")] == ["to DIALOGUE_ACT", "to DIALOGUE_ACT"]
    llm.reset_log()
    assert llm.count() == 0


async def test_load_replaces_the_script_and_keeps_the_log_while_add_queues_more() -> None:
    llm = ScriptedLLM({"A": ["a1", "a2"]}, default="d")
    await llm.respond(call("A"))
    llm.load({"B": ["b1"]})
    assert await llm.respond(call("B")) == "b1"
    with pytest.raises(UnscriptedCallError):  # the old queue and the default are gone
        await llm.respond(call("A"))
    assert llm.count() == 2  # the unscripted attempt is not a call
    llm.add("a", "more1", "more2")
    assert [await llm.respond(call("A")) for _ in range(2)] == ["more1", "more2"]


def test_unknown_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown ScriptedLLM options: defualt"):
        ScriptedLLM({}, defualt="x")


def test_a_call_describes_its_prompt_and_whether_it_wants_json() -> None:
    text = LlmCall("RESPONSE_TEXT", "  ", "hello ")
    assert (text.prompt, text.wants_json) == ("hello", False)
    assert LlmCall("RESPONSE_JSON", "sys", "usr", {}).wants_json is True
    assert LlmCall("RESPONSE_JSON", "sys", "usr", {}).prompt == "sys\n\nusr"


def test_replies_become_the_text_a_model_would_have_sent() -> None:
    assert reply_text("plain") == "plain"
    assert reply_text({"größe": "L", "n": [1, None]}) == '{"größe": "L", "n": [1, null]}'
    assert isinstance(scripted({"A": ["x"]}, default="d"), ScriptedLLM)
