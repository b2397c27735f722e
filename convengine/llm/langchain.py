"""The LangChain backend: any ``BaseChatModel``; ``ChatOpenAI`` from the environment.

JSON calls try the server's structured output (``json_schema``, then JSON mode, then tool
calling), remember the first that works, and fall back to asking for JSON in the prompt for
models without structured output. The gateway validates the result against the schema.

A call's own ``model`` / ``temperature`` are applied to a shallow copy of the chat model for that
call only (same HTTP client; the shared model is never changed). ``model.bind(...)`` is not used:
its options are lost under ``with_structured_output``.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from convengine._internal.extras import needs_extra
from convengine.catalog.errors import LlmError, LlmNotConfiguredError
from convengine.llm.scripted import LlmCall, LlmReply
from convengine.settings import LlmSettings

METHODS = ("json_schema", "json_mode", "function_calling")


class FormatUnsupported(Exception):
    """The server rejected a structured-output method."""


def chat_model_from_env(settings: LlmSettings) -> BaseChatModel:
    """``ChatOpenAI`` from OPENAI_API_KEY / OPENAI_BASE_URL / CONVENGINE_LLM_MODEL (or settings.llm)."""
    with needs_extra("openai", 'llm="openai" (ChatOpenAI)'):
        from langchain_openai import ChatOpenAI

    base_url = os.environ.get("OPENAI_BASE_URL") or settings.base_url
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key and not base_url:
        raise LlmNotConfiguredError("no LLM configured: set OPENAI_API_KEY (and optionally OPENAI_BASE_URL for an "
                                    "OpenAI-compatible server), or pass llm= to Engine.open")
    return ChatOpenAI(model=os.environ.get("CONVENGINE_LLM_MODEL") or settings.model, base_url=base_url,
                      api_key=api_key or "not-needed", temperature=settings.temperature, timeout=settings.timeout_s,
                      max_retries=0, use_responses_api=False)


def _text(message: object) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content or "")


def _usage(message: object) -> dict[str, int]:
    usage = getattr(message, "usage_metadata", None) or {}
    return {k: int(usage[k]) for k in ("input_tokens", "output_tokens", "total_tokens") if k in usage}


def _model_name(model: object) -> str:
    return str(getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__)


def model_for(model: BaseChatModel, call: LlmCall) -> BaseChatModel:
    """``model``, or a copy asking for the call's ``model`` / ``temperature`` (LlmError if it has no such field)."""
    if call.model is None and call.temperature is None:
        return model
    fields = getattr(type(model), "model_fields", None) or {}
    update: dict[str, Any] = {}
    if call.model is not None:
        name = next((f for f in ("model_name", "model") if f in fields), None)
        if name is None:
            raise LlmError(f"the chat model {type(model).__name__} has no model field, so the model "
                           f"{call.model!r} asked for by {call.call_site} cannot be applied",
                           details={"callSite": call.call_site})
        update[name] = call.model
    if call.temperature is not None:
        if "temperature" not in fields:
            raise LlmError(f"the chat model {type(model).__name__} has no temperature field, so the temperature "
                           f"asked for by {call.call_site} cannot be applied", details={"callSite": call.call_site})
        update["temperature"] = call.temperature
    return model.model_copy(update=update)


def _schema_instruction(schema: dict[str, Any]) -> str:
    if not schema:
        return "Reply with a single JSON object and nothing else."
    return ("Reply with a single JSON object and nothing else, matching this JSON schema:\n"
            + json.dumps(schema, ensure_ascii=False))


class LangChainBackend:
    """Calls a LangChain chat model (see the module docstring)."""

    def __init__(self, model: BaseChatModel, settings: LlmSettings) -> None:
        self.model = model
        self.settings = settings
        self.name = type(model).__name__
        self._working: str | None = None if settings.structured_output == "auto" else settings.structured_output

    def _messages(self, system: str, user: str) -> list[BaseMessage]:
        messages: list[BaseMessage] = [SystemMessage(system)] if system.strip() else []
        messages.append(HumanMessage(user or "(no input)"))
        return messages

    async def complete(self, call: LlmCall) -> LlmReply:
        model = model_for(self.model, call)
        if not call.wants_json:
            message = await model.ainvoke(self._messages(call.system, call.user))
            return LlmReply(_text(message), usage=_usage(message), model=_model_name(model))
        return await self._json(model, call)

    async def _json(self, model: BaseChatModel, call: LlmCall) -> LlmReply:
        schema = call.schema or {}
        methods = [self._working] if self._working else [m for m in METHODS if schema or m != "json_schema"]
        for method in methods:
            try:
                reply = await self._structured(model, call, schema, method)
            except (FormatUnsupported, NotImplementedError):
                continue
            self._working = method
            return reply
        return await self._prompted(model, call, schema)

    async def _structured(self, model: BaseChatModel, call: LlmCall, schema: dict[str, Any], method: str) -> LlmReply:
        named = copy.deepcopy(schema) if schema else {"type": "object"}
        named.setdefault("title", call.call_site.lower())
        named.setdefault("description", f"convengine {call.call_site} reply")
        system = call.system if method == "json_schema" else f"{call.system}\n\n{_schema_instruction(schema)}"
        try:
            runnable = model.with_structured_output(named, method=method, include_raw=True)
            result = await runnable.ainvoke(self._messages(system, call.user))
            assert isinstance(result, dict), "include_raw=True replies {raw, parsed, parsing_error}"
        except NotImplementedError:
            raise
        except Exception as exc:
            if _rejected_format(exc):
                raise FormatUnsupported(str(exc)) from exc
            raise
        raw = result.get("raw")
        parsed = result.get("parsed")
        text = _tool_args(raw) if method == "function_calling" else _text(raw)
        value = parsed if parsed is not None and not result.get("parsing_error") else None
        return LlmReply(text or (json.dumps(parsed) if parsed is not None else ""), value, _usage(raw),
                        _model_name(model))

    async def _prompted(self, model: BaseChatModel, call: LlmCall, schema: dict[str, Any]) -> LlmReply:
        system = f"{call.system}\n\n{_schema_instruction(schema)}".strip()
        message = await model.ainvoke(self._messages(system, call.user))
        return LlmReply(_text(message), usage=_usage(message), model=_model_name(model))


def _tool_args(message: object) -> str:
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        return json.dumps(calls[0].get("args", {}))
    return _text(message)


def _rejected_format(exc: Exception) -> bool:
    """A 4xx from the server about response_format / json_schema / tools."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    text = str(exc).lower()
    return (status in (400, 404, 415, 422) or type(exc).__name__ in ("BadRequestError", "UnprocessableEntityError")) \
        and any(word in text for word in ("response_format", "json_schema", "json_object", "tool", "function",
                                          "not supported", "unsupported"))
