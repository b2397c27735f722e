"""Provider-qualified model names: an agent node's ``openai:<model>`` answered by a ChatOpenAI the engine
builds (against the local OpenAI-compatible stub), other providers constructed by their LangChain class
without any network, and a clear error naming the extra when a provider package is missing."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from convengine.llm.providers import chat_model_for, parse_model
from convengine.settings import LlmSettings
from tests.flows.packs import chain, edge, node
from tests.flows.test_nodes import one_flow
from tests.helpers import engine_on, payload_of, turn_events
from tests.openai_stub import stub_server

ANSWER = {"action": "ANSWER", "tool_code": None, "args": None, "answer": "Rates are 5.5%.", "operation_tag": None}


def test_names_are_read_as_provider_and_model_or_left_plain() -> None:
    assert parse_model("anthropic:claude-sonnet-4-5") == parse_model(" anthropic:claude-sonnet-4-5".strip())
    qualified = parse_model("anthropic:claude-sonnet-4-5")
    assert qualified is not None and (qualified.provider, qualified.model) == ("anthropic", "claude-sonnet-4-5")
    assert parse_model("langchain_openai.ChatOpenAI:gpt-4o") is not None
    for plain in ("gpt-4o-mini", "llama3:8b", "ft:gpt-4o:acme:1"):
        assert parse_model(plain) is None, plain


def test_anthropic_is_built_by_its_langchain_class_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_anthropic import ChatAnthropic

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    qualified = parse_model("anthropic:claude-sonnet-4-5")
    assert qualified is not None
    model = chat_model_for(qualified, LlmSettings(timeout_s=12))
    assert isinstance(model, ChatAnthropic)
    assert (model.model, model.max_retries, model.default_request_timeout) == ("claude-sonnet-4-5", 0, 12)
    by_path = parse_model("langchain_anthropic.ChatAnthropic:claude-haiku-4-5")
    assert by_path is not None
    imported = chat_model_for(by_path, LlmSettings())
    assert isinstance(imported, ChatAnthropic) and imported.model == "claude-haiku-4-5"


def test_a_missing_provider_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from convengine.catalog.errors import LlmNotConfiguredError

    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)  # as if the extra were not installed
    qualified = parse_model("anthropic:claude-sonnet-4-5")
    assert qualified is not None
    with pytest.raises(LlmNotConfiguredError) as caught:
        chat_model_for(qualified, LlmSettings())
    assert "pip install 'convengine[anthropic]'" in caught.value.message
    mistral = parse_model("mistralai:mistral-large-latest")
    assert mistral is not None
    with pytest.raises(LlmNotConfiguredError) as caught:
        chat_model_for(mistral, LlmSettings())
    assert "pip install langchain-mistralai" in caught.value.message


def test_an_import_path_must_name_a_chat_model_class() -> None:
    from convengine.catalog.errors import LlmNotConfiguredError

    qualified = parse_model("langchain_core.messages.HumanMessage:x")
    assert qualified is not None
    with pytest.raises(LlmNotConfiguredError, match="is not a LangChain chat model class"):
        chat_model_for(qualified, LlmSettings())


def agent_pack(model: str) -> dict[str, Any]:
    nodes = [node("AG", "start", "start"), node("AG", "helper", "agent", instructions="Answer.", model=model),
             node("AG", "sorry", "message", text="The assistant is unavailable."), node("AG", "end", "end")]
    edges = [*chain("AG", "start", "helper", "end"), *chain("AG", "sorry", "end"),
             edge("AG", "helper", "sorry", outcome="error")]
    return one_flow("AG", nodes, edges)


async def test_an_agent_nodes_openai_model_is_its_own_chat_model(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's chat model has no model field at all; the node's ``openai:stub-agent`` is a ChatOpenAI
    the engine builds from the environment, and only the node's calls reach it."""
    engine_model = FakeListChatModel(responses=[json.dumps({"dialogueAct": "NEW_REQUEST", "confidence": 0.8})] * 20)
    with stub_server(lambda body: json.dumps(ANSWER)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        async with engine_on(db_url, agent_pack("openai:stub-agent"), llm=engine_model) as engine:
            result = await engine.aprocess("hello")
            assert result.text == "Rates are 5.5%."
            call = next(e.payload for e in await turn_events(engine, result.conversation_id)
                        if e.stage == "LLM_CALL" and e.payload["callSite"] == "MCP_PLANNER")
            assert call["model"] == "openai:stub-agent"
    assert [r["model"] for r in server.requests] == ["stub-agent"]


async def test_a_provider_without_its_package_takes_the_error_edge_naming_it(db_url: str) -> None:
    from convengine.llm import ScriptedLLM

    fake = FakeListChatModel(responses=[json.dumps({"dialogueAct": "NEW_REQUEST", "confidence": 0.8})] * 20)
    async with engine_on(db_url, agent_pack("mistralai:mistral-large-latest"), llm=fake) as engine:
        result = await engine.aprocess("hello")
        assert result.text == "The assistant is unavailable."
        events = await turn_events(engine, result.conversation_id)
        assert "pip install langchain-mistralai" in payload_of(events, "LLM_CALL_ERROR")["error"]
        assert payload_of(events, "FLOW_AGENT_FAILED")["errorCode"] == "LLM_NOT_CONFIGURED"
    scripted = ScriptedLLM({"MCP_PLANNER": [ANSWER], "INTENT_AGENT": {"intent": None, "confidence": 0}},
                           default={"dialogueAct": "NEW_REQUEST", "confidence": 0.8})
    async with engine_on(db_url, agent_pack("mistralai:mistral-large-latest"), llm=scripted) as engine:
        assert (await engine.aprocess("hello")).text == "Rates are 5.5%."  # the test double answers every model
        assert scripted.calls_to("MCP_PLANNER")[0].model == "mistralai:mistral-large-latest"


def test_the_engines_own_model_may_be_a_provider_qualified_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_anthropic import ChatAnthropic

    from convengine.catalog.errors import LlmError
    from convengine.llm import as_gateway
    from convengine.llm.langchain import LangChainBackend

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    backend = as_gateway("anthropic:claude-sonnet-4-5", LlmSettings()).backend
    assert isinstance(backend, LangChainBackend) and isinstance(backend.model, ChatAnthropic)
    assert backend.model.model == "claude-sonnet-4-5"
    for bad in ("claude", "os.system:ls"):
        with pytest.raises(LlmError, match="provider-qualified model name"):
            as_gateway(bad, LlmSettings())
