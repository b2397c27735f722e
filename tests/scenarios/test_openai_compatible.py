"""The real ChatOpenAI client against a local OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from convengine.catalog.errors import ErrorCode, LlmError
from tests.conftest import EXAMPLES
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.openai_stub import last_user_message, stub_server, system_message

pytestmark = pytest.mark.asyncio


def chat_model(base_url: str, timeout: float = 10) -> ChatOpenAI:
    return ChatOpenAI(base_url=base_url, api_key="test-key", model="stub-model", max_retries=0, timeout=timeout,
                      use_responses_api=False)


def derived_pack() -> dict[str, Any]:
    responses = [{"intent_code": "LOAN", "state_code": "START", "response_type": "DERIVED", "output_format": "TEXT",
                  "derivation_hint": "Be brief."}]
    templates = [{"intent_code": "LOAN", "state_code": "START", "output_format": "TEXT",
                  "system_prompt": "You are a loan assistant.", "user_prompt": "User: {{user_input}}"}]
    data = pack(ce_response=responses, ce_prompt_template=templates)
    data["ce_response"] = [r for r in data["ce_response"] if r.get("exact_text") != "Loan started"]
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "LLM_ONLY"
    return data


def reply_for(body: dict[str, Any]) -> str:
    fmt = body.get("response_format") or {}
    wants_json = fmt.get("type") in ("json_schema", "json_object") or body.get("tools")
    if wants_json:
        return json.dumps({"dialogueAct": "NEW_REQUEST", "confidence": 0.9})
    return f"Happy to help with: {last_user_message(body).splitlines()[0]}"


@pytest.mark.parametrize("mode", ["json_schema", "json_object"])
async def test_text_and_json_calls_through_chat_openai(db_url: str, mode: str) -> None:
    with stub_server(reply_for, mode=mode) as server:
        async with engine_on(db_url, derived_pack(), llm=chat_model(server.base_url)) as engine:
            first = await engine.aprocess("a loan please")
            assert first.payload.value == "Happy to help with: User: a loan please"
            second = await engine.aprocess("another loan", first.conversation_id)
            assert second.turn == 2
            events = await turn_events(engine, first.conversation_id)
            calls = [e.payload for e in events if e.stage == "LLM_CALL"]
            assert [c["callSite"] for c in calls] == ["DIALOGUE_ACT", "RESPONSE_TEXT"]
            assert calls[0]["usage"] == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
            assert calls[0]["model"] == "stub-model"
        formats = [(r.get("response_format") or {}).get("type") for r in server.requests]
        if mode == "json_schema":
            assert formats == ["json_schema", None, "json_schema", None]
            schema = server.requests[0]["response_format"]["json_schema"]["schema"]
            assert schema["properties"]["dialogueAct"]["enum"][0] == "AFFIRM"
        else:
            # json_schema is refused once, then JSON mode is used (and remembered)
            assert formats == ["json_schema", "json_object", None, "json_object", None]
            assert "JSON schema" in system_message(server.requests[1])


async def test_a_reply_that_violates_the_schema_is_rejected_whatever_the_server_supports(db_url: str) -> None:
    def bad(body: dict[str, Any]) -> str:
        return json.dumps({"dialogueAct": "SHOUT", "confidence": 0.9}) if body.get("response_format") else "x"

    data = derived_pack()
    data["settings"]["llm"] = {"max-retries": 0}
    with stub_server(bad, mode="json_object") as server:
        async with engine_on(db_url, data, llm=chat_model(server.base_url)) as engine:
            result = await engine.aprocess("a loan please")  # the dialogue act falls back to the regex
            events = await turn_events(engine, result.conversation_id)
            error = payload_of(events, "LLM_CALL_ERROR")
            assert error["errorCode"] == "LLM_SCHEMA_VIOLATION" and "SHOUT" in error["error"]
            assert payload_of(events, "DIALOGUE_ACT_CLASSIFIED")["source"] == "REGEX_FALLBACK"


async def test_a_server_that_times_out_gives_a_recoverable_error_and_changes_nothing(db_url: str) -> None:
    data = derived_pack()
    data["settings"]["flow"]["dialogue-act"]["resolute"] = "REGEX_ONLY"
    data["settings"]["llm"] = {"timeout-s": 0.5, "max-retries": 0}
    with stub_server(reply_for, mode="slow", delay=3.0) as server:
        async with engine_on(db_url, data, llm=chat_model(server.base_url, timeout=30)) as engine:
            first = await engine.aprocess("hello")
            before = await engine.astate(first.conversation_id)
            with pytest.raises(LlmError) as info:
                await engine.aprocess("a loan please", first.conversation_id)
            assert info.value.code == ErrorCode.LLM_TIMEOUT and info.value.recoverable
            after = await engine.astate(first.conversation_id)
            assert (after["turn"], after["intent"], after["state"]) == (before["turn"], "GREETING", "IDLE")
            assert len(await engine.ahistory(first.conversation_id)) == 1


def loan_model_reply(body: dict[str, Any]) -> str:
    """What a real model would say for the loan pack (enough to drive the flow)."""
    sys.path.insert(0, str(EXAMPLES))
    from loan_application_scripted import ask_for_missing, dialogue_act, extract  # type: ignore[import-not-found]

    from convengine.llm import LlmCall

    user = last_user_message(body)
    call = LlmCall("?", system_message(body), user)
    schema = json.dumps(body.get("response_format") or body.get("tools") or {})
    if "dialogueAct" in schema:
        return json.dumps(dialogue_act(call))
    if "customerName" in schema:
        return json.dumps(extract(call))
    return ask_for_missing(call)


async def test_the_loan_pack_works_unchanged_with_a_real_chat_model_client(db_url: str) -> None:
    sys.path.insert(0, str(EXAMPLES))
    from loan_application_tasks import TASKS  # type: ignore[import-not-found]

    with stub_server(loan_model_reply) as server:
        async with engine_on(db_url, EXAMPLES / "loan_application.yaml", llm=chat_model(server.base_url),
                             tasks=TASKS) as engine:
            cid = None
            for text, state in [("I want a loan", "COLLECT"), ("my name is Jo Park", "COLLECT"),
                                ("12000 for 24 months", "CONFIRM"), ("yes", "SUBMITTED")]:
                result = await engine.aprocess(text, cid)
                cid = result.conversation_id
                assert result.state == state, (text, result.text)
            assert re.match(r"Submitted! Your application number is LN-\d+\.", result.text)
