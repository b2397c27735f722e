"""The LangChain backend: ChatOpenAI against the local OpenAI-compatible stub (127.0.0.1) and
LangChain's fake chat model; structured output methods, per-call model and temperature on a copy,
JSON asked for in the prompt when a model has no structured output, and real SDK errors
classified as transient or not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from pydantic import Field

from convengine.catalog.errors import ErrorCode, LlmError
from convengine.llm import LlmGateway, as_gateway
from convengine.llm.langchain import LangChainBackend
from convengine.settings import LlmSettings
from tests.llm.fakes import FakeTurn
from tests.openai_stub import last_user_message, stub_server, system_message

SCHEMA = {"type": "object", "required": ["size"], "properties": {"size": {"type": "string"}}}


def chat(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(base_url=base_url, api_key="test-key", model="stub-model", max_retries=0, timeout=10,
                      temperature=0.1, use_responses_api=False)


def echo(body: dict[str, Any]) -> str:
    if body.get("response_format") or body.get("tools"):
        return json.dumps({"size": "L"})
    return f"echo: {last_user_message(body)}"


def gateway(model: Any, **llm: Any) -> LlmGateway:
    return as_gateway(model, LlmSettings(**{"max_retries": 0, **llm}))


async def test_json_through_forced_function_calling_reads_the_tool_arguments() -> None:
    with stub_server(echo) as server:
        gate = gateway(chat(server.base_url), structured_output="function_calling")
        turn = FakeTurn()
        value = await gate.json(turn, "SCHEMA_EXTRACTION", system="Extract.", user="a large one", schema=SCHEMA)
        assert value == {"size": "L"}
        request = server.requests[0]
        assert request["tools"][0]["function"]["parameters"]["properties"] == SCHEMA["properties"]
        assert "response_format" not in request
        assert turn.payloads("LLM_CALL")[0]["usage"] == {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}


async def test_a_call_may_ask_for_another_model_and_temperature_without_changing_the_shared_one() -> None:
    with stub_server(echo) as server:
        model = chat(server.base_url)
        gate = gateway(model)
        turn = FakeTurn()
        assert await gate.text(turn, "RESPONSE_TEXT", system="s", user="hi", model="big-model",
                               temperature=0.7) == "echo: hi"
        await gate.text(turn, "RESPONSE_TEXT", system="s", user="again")
        asked, plain = server.requests
        assert (asked["model"], asked["temperature"]) == ("big-model", 0.7)
        assert (plain["model"], plain["temperature"]) == ("stub-model", 0.1)
        assert (model.model_name, model.temperature) == ("stub-model", 0.1)
        assert [c["model"] for c in turn.payloads("LLM_CALL")] == ["big-model", "stub-model"]


async def test_an_override_a_model_cannot_take_is_an_error_naming_the_call_site() -> None:
    gate = gateway(GenericFakeChatModel(messages=iter([AIMessage(content="x")])))
    for option in ({"model": "big"}, {"temperature": 0.5}):
        with pytest.raises(LlmError) as info:
            await gate.text(FakeTurn(), "RESPONSE_TEXT", system="s", user="u", **option)
        assert "GenericFakeChatModel has no" in info.value.message and "RESPONSE_TEXT" in info.value.message


class RecordingModel(GenericFakeChatModel):
    """LangChain's fake chat model (no structured output), remembering the messages it was sent."""

    sent: list[Any] = Field(default_factory=list)

    def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(messages)
        return super()._generate(messages, *args, **kwargs)


async def test_a_model_without_structured_output_is_asked_for_json_in_the_prompt() -> None:
    model = RecordingModel(messages=iter([AIMessage(content='```json\n{"size": "S"}\n```'),
                                          AIMessage(content="not json")]))
    gate = gateway(model)
    assert await gate.json(FakeTurn(), "SCHEMA_EXTRACTION", system="Extract.", user="small", schema=SCHEMA) == \
        {"size": "S"}
    system, user = model.sent[0]
    assert system.content == ("Extract.\n\nReply with a single JSON object and nothing else, matching this JSON "
                              "schema:\n" + json.dumps(SCHEMA))
    assert user.content == "small"
    with pytest.raises(LlmError) as info:
        await gate.json(FakeTurn(), "SCHEMA_EXTRACTION", system="", user="", schema={})
    assert info.value.code is ErrorCode.LLM_INVALID_RESPONSE
    system, user = model.sent[1]
    assert (system.content, user.content) == ("Reply with a single JSON object and nothing else.", "(no input)")


async def test_text_in_content_parts_is_joined() -> None:
    parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}, {"type": "image_url"}]
    gate = gateway(GenericFakeChatModel(messages=iter([AIMessage(content=parts)])))
    assert await gate.text(FakeTurn(), "RESPONSE_TEXT", system="", user="hi") == "Hello there"


async def test_an_overloaded_server_fails_the_call_recoverably_until_it_is_back() -> None:
    with stub_server(echo) as server:
        server.outage = True
        gate = gateway(chat(server.base_url))
        turn = FakeTurn()
        with pytest.raises(LlmError) as info:
            await gate.text(turn, "RESPONSE_TEXT", system="s", user="hi")
        assert info.value.code is ErrorCode.LLM_CALL_FAILED and info.value.recoverable
        assert info.value.message.endswith("Error code: 503 - the model is overloaded")
        server.outage = False
        assert await gate.text(turn, "RESPONSE_TEXT", system="s", user="back") == "echo: back"


async def test_an_overloaded_server_is_retried() -> None:
    with stub_server(echo) as server:
        server.outage = True
        turn = FakeTurn()
        with pytest.raises(LlmError):
            await gateway(chat(server.base_url), max_retries=1).text(turn, "RESPONSE_TEXT", system="s", user="hi")
        assert len(server.requests) == 2
        assert [e["willRetry"] for e in turn.payloads("LLM_CALL_ERROR")] == [True, False]


async def test_a_server_refusing_json_schema_falls_back_and_remembers() -> None:
    with stub_server(echo, mode="json_object") as server:
        backend_gate = gateway(chat(server.base_url))
        for _ in range(2):
            assert await backend_gate.json(FakeTurn(), "POLICY", system="Judge.", user="x", schema=SCHEMA) == \
                {"size": "L"}
        kinds = [(r.get("response_format") or {}).get("type") for r in server.requests]
        assert kinds == ["json_schema", "json_object", "json_object"]
        assert "matching this JSON schema" in system_message(server.requests[1])
        assert isinstance(backend_gate.backend, LangChainBackend)


async def test_openai_from_the_environment_uses_its_base_url_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with stub_server(echo) as server:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("CONVENGINE_LLM_MODEL", "env-model")
        gate = as_gateway("openai", LlmSettings(model="settings-model", temperature=0.2, max_retries=0))
        assert await gate.text(FakeTurn(), "RESPONSE_TEXT", system="", user="hi") == "echo: hi"
        assert (server.requests[0]["model"], server.requests[0]["temperature"]) == ("env-model", 0.2)
