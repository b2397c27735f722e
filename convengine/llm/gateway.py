"""LlmGateway: every LLM call goes through here, named by its call site.

Text and JSON-with-schema calls over a backend: a LangChain ``BaseChatModel`` (``ChatOpenAI``
against any OpenAI-compatible server) or :class:`~convengine.llm.scripted.ScriptedLLM`. Each
call is timed, retried on transient failures, audited (``LLM_CALL`` / ``LLM_CALL_ERROR`` with
the call site, latency and token usage) and optionally logged to ``ce_llm_call_log``. JSON
replies are parsed and validated against the schema whatever the server supports. A call site
may ask for another model or temperature for one call (``model=`` / ``temperature=``); the audit
and the call log record what was asked for.
Failures become ``LLM_TIMEOUT``, ``LLM_CALL_FAILED``, ``LLM_INVALID_RESPONSE`` or
``LLM_SCHEMA_VIOLATION`` (all recoverable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol

import jsonschema
from jsonschema.protocols import Validator
from langchain_core.language_models import BaseChatModel

from convengine._internal import numbers
from convengine._internal.jsonschemas import checked_validator
from convengine._internal.jsonvalue import JsonValue
from convengine._internal.model_names import model_problem as problem_of
from convengine._internal.storable import storable_text, storable_value, unstorable
from convengine._internal.working import waiting_outside
from convengine.catalog import stages
from convengine.catalog.errors import (
    LlmError,
    LlmInvalidResponseError,
    LlmSchemaViolationError,
    LlmTimeoutError,
)
from convengine.llm import spend
from convengine.llm.langchain import LangChainBackend
from convengine.llm.providers import chat_model_for, chat_model_from_env, parse_model
from convengine.llm.scripted import LlmCall, LlmReply, ScriptedLLM, UnscriptedCallError, reply_text
from convengine.llm.session import LlmSession
from convengine.llm.spend import SpendStore
from convengine.security.secrets import mask, reply_secrets, secret_values
from convengine.settings import LlmSettings

CALL_SITES = ("DIALOGUE_ACT", "INTENT_AGENT", "INTENT_COLLISION", "SCHEMA_EXTRACTION", "RESPONSE_TEXT",
              "RESPONSE_JSON", "MCP_PLANNER", "DISAMBIGUATION", "MEMORY_SUMMARY", "POLICY",
              "KNOWLEDGE_SYNTHESIS")


class LlmBackend(Protocol):
    """What the gateway needs from a model."""

    name: str

    async def complete(self, call: LlmCall) -> LlmReply: ...


class CallStore(SpendStore, Protocol):
    """Where the gateway writes the call log (the engine's ConversationStore; spend also uses its ``run``)."""

    async def write_llm_calls(self, rows: Sequence[dict[str, Any]]) -> None: ...


class ScriptedBackend:
    name = "scripted"

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm

    async def complete(self, call: LlmCall) -> LlmReply:
        reply = await self.llm.respond(call)
        model = call.model or "scripted"
        if isinstance(reply, LlmReply):  # a scripted reply that reports its model and token usage
            return dataclasses.replace(reply, model=reply.model or model)
        if call.wants_json and not isinstance(reply, str):
            return LlmReply(reply_text(reply), reply, model=model)
        return LlmReply(reply_text(reply), model=model)


_TRANSIENT_NAMES = ("APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError",
                    "ConnectError", "ReadError", "RemoteProtocolError", "ServiceUnavailableError")


def _storable(reply: LlmReply) -> LlmReply:
    """A model's reply with NUL characters and lone surrogates replaced: the reply is untrusted text that
    the turn records (audit, history, call log), and PostgreSQL cannot store a NUL."""
    text = storable_text(reply.text)
    value = reply.value if reply.value is None or unstorable(reply.value, "reply") is None else storable_value(reply.value)
    if text is reply.text and value is reply.value:
        return reply
    return dataclasses.replace(reply, text=text, value=value)


def _transient(exc: BaseException) -> bool:
    """A failure worth another attempt: a broken connection, or an SDK error of a transient kind
    (subclasses count: langchain-openai raises its own subclass of ``openai.InternalServerError``)."""
    return isinstance(exc, (ConnectionError, OSError)) or any(
        kind.__name__ in _TRANSIENT_NAMES for kind in type(exc).__mro__)


class LlmGateway:
    """Named, audited, bounded LLM calls; see the module docstring."""

    def __init__(self, backend: LlmBackend, settings: LlmSettings, *, store: CallStore | None = None) -> None:
        self.backend = backend
        self.settings = settings
        self.store = store

    @property
    def scripted(self) -> ScriptedLLM | None:
        return self.backend.llm if isinstance(self.backend, ScriptedBackend) else None

    async def text(self, turn: LlmSession, call_site: str, *, system: str, user: str, model: str | None = None,
                   temperature: float | None = None) -> str:
        """The model's text reply; ``model`` / ``temperature`` override the configured ones for this call."""
        reply = await self._call(turn, LlmCall(call_site, system, user, None, turn.conversation_id, turn.intent,
                                               turn.state, model, temperature))
        return reply.text

    async def json(self, turn: LlmSession, call_site: str, *, system: str, user: str,
                   schema: dict[str, Any] | None, validate: bool = True, model: str | None = None,
                   temperature: float | None = None) -> Any:
        """A JSON value, validated against ``schema`` (``{}`` asks for any JSON object).

        ``validate=False`` still sends the schema to the model but leaves checking to the caller
        (the planner normalises malformed plans into safe answers). ``model`` / ``temperature``
        override the configured ones for this call only.
        """
        call = LlmCall(call_site, system, user, schema if schema is not None else {}, turn.conversation_id,
                       turn.intent, turn.state, model, temperature)
        reply = await self._call(turn, call)
        try:
            value = reply.value if reply.value is not None else parse_json(reply.text, call_site)
            check_finite(value, call_site)
            if schema and validate:
                validate_reply(value, schema, call_site)
        except LlmError as exc:
            turn.audit(stages.LLM_CALL_ERROR, {"callSite": call_site, "errorCode": exc.code.value, "error": exc.message,
                                          "willRetry": False, "reply": reply.text[:2000]})
            raise
        return value

    async def _call(self, turn: LlmSession, call: LlmCall) -> LlmReply:
        attempts = self.settings.max_retries + 1
        started = time.perf_counter()
        for attempt in range(1, attempts + 1):
            try:
                # the turn's work slot is lent while the model answers; asyncio.timeout: no task per call
                async with waiting_outside(), asyncio.timeout(self.settings.timeout_s):
                    answer = await self.backend.complete(call)
                reply = _storable(answer)
                await self._record(turn, call, reply, started, attempt)
                return reply
            except UnscriptedCallError:
                raise
            except TimeoutError as exc:
                error: LlmError = LlmTimeoutError(
                    f"LLM call {call.call_site} timed out after {self.settings.timeout_s:g}s",
                    details={"callSite": call.call_site})
                cause: BaseException = exc
            except LlmError as exc:
                error, cause = exc, exc
            except Exception as exc:  # noqa: BLE001 - provider SDKs raise many types
                error = LlmError(f"LLM call {call.call_site} failed: {type(exc).__name__}: {_short(exc)}",
                                 details={"callSite": call.call_site})
                cause = exc
            retry = attempt < attempts and (isinstance(error, LlmTimeoutError) or _transient(cause))
            await self._record_error(turn, call, error, started, attempt, will_retry=retry)
            if not retry:
                raise error from cause
            await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))
        raise AssertionError("unreachable")

    async def _record(self, turn: LlmSession, call: LlmCall, reply: LlmReply, started: float, attempt: int) -> None:
        latency = (time.perf_counter() - started) * 1000
        payload: dict[str, Any] = {"callSite": call.call_site, "latencyMs": round(latency, 2), "attempt": attempt,
                                   "model": reply.model or call.model or self.backend.name, "usage": reply.usage,
                                   "json": call.wants_json}
        if call.temperature is not None:
            payload["temperature"] = call.temperature
        turn.audit(stages.LLM_CALL, payload)
        await self._log(turn, call, reply.text, True, None, reply.model)
        await spend.record(self.store, turn, call.call_site, reply.model or call.model or self.settings.model,
                           reply.usage)

    async def _record_error(self, turn: LlmSession, call: LlmCall, error: LlmError, started: float, attempt: int, *,
                            will_retry: bool) -> None:
        latency = (time.perf_counter() - started) * 1000
        turn.audit(stages.LLM_CALL_ERROR, {"callSite": call.call_site, "latencyMs": round(latency, 2), "attempt": attempt,
                                      "errorCode": error.code.value, "error": error.message, "willRetry": will_retry})
        await self._log(turn, call, None, False, error.message, None)

    async def _log(self, turn: LlmSession, call: LlmCall, text: str | None, ok: bool, error: str | None,
                   model: str | None) -> None:
        if not self.settings.log_calls or self.store is None:
            return
        row = {"conversation_id": turn.conversation_id, "intent_code": turn.intent, "state_code": turn.state,
               "provider": self.backend.name, "model": model or call.model or self.settings.model,
               "temperature": self.settings.temperature if call.temperature is None else call.temperature,
               "prompt_text": call.prompt,
               "user_context": call.call_site, "response_text": text, "success": ok, "error_message": error}
        declared = list(turn.settings.conversation_memory.secret)
        if declared:  # a secret property may be in a prompt or a reply: the log keeps it masked
            known = [*turn.ctx.secret_values, *reply_secrets(text, declared)]
            row = mask(row, secret_values(known, (turn.read_context(), turn.read_params()), declared))
        try:
            await self.store.write_llm_calls([row])
        except Exception:  # noqa: BLE001 - the call log never breaks a turn
            turn.audit(stages.LLM_CALL_LOG_FAILED, {"callSite": call.call_site})


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def parse_json(text: str, call_site: str) -> Any:
    """Parse a model's JSON reply (code fences tolerated); LLM_INVALID_RESPONSE otherwise."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        return json.loads(body)
    except RecursionError:
        raise LlmInvalidResponseError(f"LLM reply for {call_site} is JSON nested too deeply to read",
                                      details={"callSite": call_site}) from None
    except json.JSONDecodeError as exc:
        start, end = body.find("{"), body.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(body[start:end + 1])
            except (json.JSONDecodeError, RecursionError):
                pass
        raise LlmInvalidResponseError(f"LLM reply for {call_site} is not valid JSON ({exc.msg}): {_preview(text)}",
                                      details={"callSite": call_site}) from None


def check_finite(value: object, call_site: str) -> None:
    """LLM_INVALID_RESPONSE for a NaN or infinite number anywhere in a reply (``NaN``, ``Infinity``,
    ``1e999``): JSON Schema's ``number`` accepts them, and NaN makes every comparison false; and for a
    whole number past the 64-bit range, which no checkpoint can hold."""
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise LlmInvalidResponseError(f"LLM reply for {call_site} holds {item!r}, not a finite number",
                                          details={"callSite": call_site})
        if isinstance(item, int) and not isinstance(item, bool) and not numbers.in_range(item):
            raise LlmInvalidResponseError(f"LLM reply for {call_site} holds {numbers.shown(item)}, past "
                                          f"{numbers.RANGE_TEXT}", details={"callSite": call_site})
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Validator:
    """A checked validator per distinct schema (checking a schema costs more than validating a reply)."""
    return checked_validator(json.loads(schema_json))


def validate_reply(value: JsonValue, schema: dict[str, Any], call_site: str) -> None:
    try:
        _validator(json.dumps(schema, sort_keys=True)).validate(value)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise LlmSchemaViolationError(
            f"LLM reply for {call_site} does not match its schema at {where}: {exc.message}",
            details={"callSite": call_site}) from None
    except jsonschema.SchemaError as exc:
        raise LlmSchemaViolationError(f"the schema for {call_site} is invalid: {exc.message}",
                                      details={"callSite": call_site}) from None


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__


def _preview(text: str) -> str:
    return text[:200] + ("..." if len(text) > 200 else "")


def as_gateway(llm: LlmGateway | ScriptedLLM | BaseChatModel | str, settings: LlmSettings, *, store: CallStore | None = None) -> LlmGateway:
    """A gateway for what the caller passed: a gateway, a ScriptedLLM, a chat model, "openai", or a
    provider-qualified model name (see :mod:`convengine.llm.providers`)."""
    if isinstance(llm, LlmGateway):
        return llm
    if isinstance(llm, ScriptedLLM):
        return LlmGateway(ScriptedBackend(llm), settings, store=store)

    if isinstance(llm, str):
        qualified = parse_model(llm)
        if qualified is not None and not problem_of(llm):
            llm = chat_model_for(qualified, settings)
        elif llm.lower() not in ("openai", "env"):
            raise LlmError(f"unknown llm {llm!r}: pass a LangChain chat model, a ScriptedLLM, 'openai' or a "
                           "provider-qualified model name ('anthropic:claude-sonnet-4-5')")
        else:
            llm = chat_model_from_env(settings)
    return LlmGateway(LangChainBackend(llm, settings), settings, store=store)
