"""The LLM gateway call by call: JSON replies parsed and checked against their schema, transient
failures retried and others not, every attempt audited, call-log rows written with secrets
masked, unstorable characters made storable, and a log that cannot be written never failing
the call."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, LlmError, LlmNotConfiguredError
from convengine.llm import Delay, LlmGateway, ScriptedLLM, UnscriptedCallError, as_gateway
from convengine.llm.gateway import parse_json
from convengine.settings import LlmSettings
from tests.llm.fakes import FakeStore, FakeTurn, settings

SCHEMA = {"type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer", "minimum": 1},
                                                                "size": {"enum": ["S", "L"]}}}


def gateway(llm: ScriptedLLM, store: FakeStore | None = None, **llm_settings: Any) -> LlmGateway:
    return as_gateway(llm, LlmSettings(**{"log_calls": True, **llm_settings}), store=store)


async def ask_json(reply: Any, schema: dict[str, Any] | None = SCHEMA, **kwargs: Any) -> tuple[Any, FakeTurn]:
    turn = FakeTurn()
    value = await gateway(ScriptedLLM({"RESPONSE_JSON": [reply]})).json(
        turn, "RESPONSE_JSON", system="s", user="u", schema=schema, **kwargs)
    return value, turn


async def json_error(reply: Any, schema: dict[str, Any] | None = SCHEMA) -> tuple[LlmError, FakeTurn]:
    turn = FakeTurn()
    with pytest.raises(LlmError) as info:
        await gateway(ScriptedLLM({"RESPONSE_JSON": [reply]})).json(turn, "RESPONSE_JSON", system="s", user="u",
                                                                    schema=schema)
    return info.value, turn


@pytest.mark.parametrize("reply", [
    {"qty": 2, "size": "L"},
    '{"qty": 2, "size": "L"}',
    '```json\n{"qty": 2, "size": "L"}\n```',
    '```\n{"qty": 2, "size": "L"}\n```',
    'Sure! Here it is: {"qty": 2, "size": "L"} Anything else?',
])
async def test_a_json_reply_is_read_from_a_value_text_fences_or_surrounding_prose(reply: Any) -> None:
    value, turn = await ask_json(reply)
    assert value == {"qty": 2, "size": "L"}
    assert turn.payloads("LLM_CALL")[0]["json"] is True and not turn.payloads("LLM_CALL_ERROR")


@pytest.mark.parametrize(("reply", "code", "message"), [
    ("I cannot help with that", ErrorCode.LLM_INVALID_RESPONSE,
     "LLM reply for RESPONSE_JSON is not valid JSON (Expecting value): I cannot help with that"),
    ('{"qty": NaN}', ErrorCode.LLM_INVALID_RESPONSE, "holds nan, not a finite number"),
    ('{"qty": 1e999}', ErrorCode.LLM_INVALID_RESPONSE, "holds inf, not a finite number"),
    ('{"qty": 1, "n": [[' + "9" * 30 + "]]}", ErrorCode.LLM_INVALID_RESPONSE, "past"),
    ("[" * 100_000 + "]" * 100_000, ErrorCode.LLM_INVALID_RESPONSE, "is JSON nested too deeply to read"),
    ({"qty": 0}, ErrorCode.LLM_SCHEMA_VIOLATION,
     "LLM reply for RESPONSE_JSON does not match its schema at qty: 0 is less than the minimum of 1"),
    ({"qty": 2, "size": "M"}, ErrorCode.LLM_SCHEMA_VIOLATION, "does not match its schema at size: 'M' is not one of"),
    ({"size": "L"}, ErrorCode.LLM_SCHEMA_VIOLATION, "at (root): 'qty' is a required property"),
    ([1, 2], ErrorCode.LLM_SCHEMA_VIOLATION, "at (root): [1, 2] is not of type 'object'"),
])
async def test_a_bad_json_reply_is_a_recoverable_error_audited_with_the_reply(reply: Any, code: ErrorCode,
                                                                              message: str) -> None:
    error, turn = await json_error(reply)
    assert error.code is code and message in error.message and error.recoverable
    assert error.details["callSite"] == "RESPONSE_JSON"
    audited = turn.payloads("LLM_CALL_ERROR")
    assert len(audited) == 1 and audited[0]["errorCode"] == code.value and audited[0]["willRetry"] is False
    assert len(audited[0]["reply"]) <= 2000
    assert turn.stages() == ["LLM_CALL", "LLM_CALL_ERROR"]  # the call itself succeeded: it is not retried


async def test_an_invalid_schema_is_named_as_such() -> None:
    error, _ = await json_error({"qty": 1}, schema={"type": "object", "properties": {"qty": {"type": "integr"}}})
    assert error.code is ErrorCode.LLM_SCHEMA_VIOLATION
    assert error.message.startswith("the schema for RESPONSE_JSON is invalid")


async def test_an_empty_schema_takes_any_json_and_validate_false_leaves_checking_to_the_caller() -> None:
    assert (await ask_json('["any", {"json": true}]', schema={}))[0] == ["any", {"json": True}]
    assert (await ask_json('```json\n["fenced", 1]\n```', schema={}))[0] == ["fenced", 1]
    assert (await ask_json('{"qty": -5}', schema=None))[0] == {"qty": -5}
    value, turn = await ask_json({"qty": "many"}, validate=False)
    assert value == {"qty": "many"} and not turn.payloads("LLM_CALL_ERROR")


def test_a_long_unreadable_reply_is_cut_in_the_message() -> None:
    with pytest.raises(LlmError) as info:
        parse_json("x" * 500, "POLICY")
    assert info.value.message.endswith("x" * 200 + "...")


async def test_transient_failures_are_retried_and_every_attempt_is_audited() -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [ConnectionResetError("reset"), TimeoutError(), "ok"]})
    turn, store = FakeTurn(), FakeStore()
    reply = await gateway(llm, store, max_retries=2).text(turn, "INTENT_AGENT", system="s", user="u")
    assert reply == "ok" and llm.count() == 3
    errors = turn.payloads("LLM_CALL_ERROR")
    assert [(e["attempt"], e["errorCode"], e["willRetry"]) for e in errors] == [
        (1, "LLM_CALL_FAILED", True), (2, "LLM_TIMEOUT", True)]
    assert "ConnectionResetError: reset" in errors[0]["error"]
    assert turn.payloads("LLM_CALL")[0]["attempt"] == 3
    assert [row["success"] for row in store.rows] == [False, False, True]
    assert store.rows[0]["error_message"] == errors[0]["error"] and store.rows[0]["response_text"] is None


async def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [ConnectionRefusedError("refused")] * 3})
    turn = FakeTurn()
    with pytest.raises(LlmError) as info:
        await gateway(llm, max_retries=1).text(turn, "INTENT_AGENT", system="s", user="u")
    assert llm.count() == 2 and info.value.code is ErrorCode.LLM_CALL_FAILED and info.value.recoverable
    assert [e["willRetry"] for e in turn.payloads("LLM_CALL_ERROR")] == [True, False]
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


async def test_a_failure_that_is_not_transient_is_not_retried() -> None:
    llm = ScriptedLLM({"INTENT_AGENT": [ValueError("bad request: model not found"), "never reached"]})
    turn = FakeTurn()
    with pytest.raises(LlmError) as info:
        await gateway(llm, max_retries=3).text(turn, "INTENT_AGENT", system="s", user="u")
    assert llm.count() == 1
    assert info.value.message == "LLM call INTENT_AGENT failed: ValueError: bad request: model not found"


async def test_an_unscripted_call_is_a_test_bug_and_is_neither_retried_nor_audited() -> None:
    turn = FakeTurn()
    with pytest.raises(UnscriptedCallError):
        await gateway(ScriptedLLM(), max_retries=3).text(turn, "POLICY", system="s", user="u")
    assert turn.events == []


async def test_a_slow_model_times_out_after_timeout_s() -> None:
    llm = ScriptedLLM({"RESPONSE_TEXT": [Delay(3, "late")]})
    turn = FakeTurn()
    with pytest.raises(LlmError) as info:
        await gateway(llm, timeout_s=0.1, max_retries=0).text(turn, "RESPONSE_TEXT", system="s", user="u")
    assert info.value.code is ErrorCode.LLM_TIMEOUT
    assert info.value.message == "LLM call RESPONSE_TEXT timed out after 0.1s"


async def test_a_call_is_audited_and_logged_with_what_was_asked_for() -> None:
    llm = ScriptedLLM({"RESPONSE_TEXT": ["Hello!", "Again"]})
    turn, store = FakeTurn(), FakeStore()
    gate = gateway(llm, store, model="configured-model", temperature=0.3)
    await gate.text(turn, "RESPONSE_TEXT", system="Be brief.", user="Hi there")
    await gate.text(turn, "RESPONSE_TEXT", system="", user="Hi", model="big-model", temperature=0.9)
    first, second = turn.payloads("LLM_CALL")
    assert (first["callSite"], first["model"], first["attempt"], first["json"]) == ("RESPONSE_TEXT", "scripted", 1,
                                                                                     False)
    assert "temperature" not in first and first["latencyMs"] >= 0
    assert (second["model"], second["temperature"]) == ("big-model", 0.9)
    assert llm.calls[1].call.model == "big-model" and llm.calls[1].call.temperature == 0.9
    assert store.rows[0] == {"conversation_id": "c-1", "intent_code": "LOAN", "state_code": "START",
                             "provider": "scripted", "model": "scripted", "temperature": 0.3,
                             "prompt_text": "Be brief.\n\nHi there", "user_context": "RESPONSE_TEXT",
                             "response_text": "Hello!", "success": True, "error_message": None}
    assert (store.rows[1]["model"], store.rows[1]["temperature"], store.rows[1]["prompt_text"]) == (
        "big-model", 0.9, "Hi")


async def test_nothing_is_logged_unless_log_calls_is_on() -> None:
    store = FakeStore()
    await gateway(ScriptedLLM(default="x"), store, log_calls=False).text(FakeTurn(), "RESPONSE_TEXT", system="s",
                                                                         user="u")
    assert store.rows == []


async def test_a_call_log_that_cannot_be_written_is_audited_and_the_reply_still_returns() -> None:
    turn = FakeTurn()
    reply = await gateway(ScriptedLLM(default="fine"), FakeStore(fail=True)).text(turn, "POLICY", system="s", user="u")
    assert reply == "fine"
    assert turn.payloads("LLM_CALL_LOG_FAILED") == [{"callSite": "POLICY"}]


async def test_secret_values_in_prompts_and_replies_are_masked_in_the_call_log() -> None:
    turn = FakeTurn(settings(conversation_memory={"secret": ["pin", "otp"]}), params={"pin": "73519"},
                    context={"otp": "42"})
    turn.ctx.secret_values = ["taken-out-earlier"]
    store = FakeStore()
    llm = ScriptedLLM({"SCHEMA_EXTRACTION": ['{"pin": "88812", "otp": "42", "name": "Jo"}']})
    value = await gateway(llm, store).json(turn, "SCHEMA_EXTRACTION", system="Known: taken-out-earlier",
                                           user="my pin is 73519, code 42, 1427", schema={})
    assert value["pin"] == "88812"  # the caller gets the real value
    assert llm.calls[0].call.user == "my pin is 73519, code 42, 1427"  # and so did the model
    row = store.rows[0]
    assert row["prompt_text"] == "Known: ***\n\nmy pin is ***, code 42, 1427"  # a short secret only when whole
    # the reply's own secret is masked too; a value under 4 characters inside a longer text is not (by design)
    assert row["response_text"] == '{"pin": "***", "otp": "42", "name": "Jo"}'


@pytest.mark.parametrize(("reply", "text", "value"), [
    ("nul\x00here", "nul\ufffdhere", None),
    ("lone \ud800 surrogate", "lone \ufffd surrogate", None),
    # a JSON value's text escapes the NUL (storable as it is); the value itself has it replaced
    ({"k\x00": ["v\x00", 1]}, '{"k\\u0000": ["v\\u0000", 1]}', {"k\ufffd": ["v\ufffd", 1]}),
])
async def test_unstorable_characters_in_a_reply_are_replaced(reply: Any, text: str, value: Any) -> None:
    store = FakeStore()
    gate = gateway(ScriptedLLM({"RESPONSE_TEXT": [reply], "RESPONSE_JSON": [reply]}), store)
    if value is None:
        assert await gate.text(FakeTurn(), "RESPONSE_TEXT", system="s", user="u") == text
    else:
        assert await gate.json(FakeTurn(), "RESPONSE_JSON", system="s", user="u", schema={}) == value
    assert store.rows[0]["response_text"] == text and "\x00" not in text


async def test_as_gateway_accepts_a_gateway_a_scripted_llm_or_openai_and_refuses_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = gateway(ScriptedLLM())
    assert as_gateway(gate, LlmSettings()) is gate
    assert gate.scripted is not None
    with pytest.raises(LlmError, match="unknown llm 'gpt'"):
        as_gateway("gpt", LlmSettings())
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(LlmNotConfiguredError) as info:
        as_gateway("openai", LlmSettings())
    assert info.value.code is ErrorCode.LLM_NOT_CONFIGURED and "OPENAI_API_KEY" in info.value.message
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    openai = as_gateway("OpenAI", LlmSettings(model="local-model"))
    assert openai.scripted is None and openai.backend.name == "ChatOpenAI"
