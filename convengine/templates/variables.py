"""The variables a template sees, with ConvEngine's aliases.

Explicit variables (``session``, ``inputParams``, ``context``, ``user_input`` and its aliases,
``conversation_history``, time variables...) win; any other name is looked up in the session
facts, input params, context and schema-restricted context, in that order (ConvEngine flattens
them all to the top level). Only the names a template uses are computed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from convengine.catalog import state as keys
from convengine.rules.facts import FactsInput, session_fields
from convengine.templates.namespaces import PRODUCERS as MEMORY_NAMESPACES
from convengine.templates.namespaces import NamespaceSession


class TemplateSession(NamespaceSession, Protocol):
    """The slice of a turn that templates read (implemented by the nodes' Turn): the turn view, what
    the memory namespaces read, and the texts and facts templates name."""

    @property
    def standalone_query(self) -> str | None: ...

    @property
    def resolved_input(self) -> str: ...

    def facts_input(self) -> FactsInput: ...

    def schema_json(self) -> dict[str, Any]: ...


_ALIASES: dict[str, tuple[str, ...]] = {
    "user_input": ("user_input", "userInput", "user_text", "userText", "input_text", "inputText", "input",
                   "user_message", "userMessage"),
    "resolved_user_input": ("resolved_user_input", "resolvedUserInput", "resolved_input", "resolvedInput",
                            "effective_input", "effectiveInput", "effective_user_input", "effectiveUserInput",
                            "final_user_input", "finalUserInput"),
    "standalone_query": ("standalone_query", "standaloneQuery", "rewritten_query", "rewrittenQuery", "query_rewrite",
                         "queryRewrite"),
    "conversation_history": ("conversation_history", "conversationHistory", "history"),
    "context_json": ("contextJson", "context_json"),
    "container_data": ("container_data", "containerData"),
    "pending_clarification": ("pending_clarification", "pendingClarification"),
    "input_params": ("inputParams", "safeInputParams", "rawInputParams"),
    "schema_json": ("schema_json", "schemaJson"),
    "conversation_id": ("conversationId",),
    "current_date": ("current_date", "currentDate"),
    "current_datetime": ("current_datetime", "currentDateTime", "current_system_datetime"),
    "current_year": ("current_year", "currentYear"),
    "current_timezone": ("current_timezone", "currentTimezone", "current_system_timezone"),
}
_CANONICAL = {alias: key for key, aliases in _ALIASES.items() for alias in aliases}


def conversation_history(turn: TemplateSession) -> list[dict[str, Any]]:
    """The window of recent turns as ``{user, assistant}``, newest first."""
    return [{"user": t.get("user"), "assistant": t.get("assistant")} for t in reversed(turn.get(keys.RECENT_TURNS) or [])]


def _clarification(context: Mapping[str, Any]) -> str:
    pending = context.get("pending_clarification")
    return (pending.get("question") or "") if isinstance(pending, Mapping) else ""


class _Clock:
    """The turn's "now", read once per template (every time variable names the same instant)."""

    __slots__ = ("_now",)

    def __init__(self) -> None:
        self._now: datetime | None = None

    def __call__(self) -> datetime:
        if self._now is None:
            self._now = datetime.now().astimezone()
        return self._now


def _session(turn: TemplateSession, _: _Clock) -> dict[str, Any]:
    return {**session_fields(turn.facts_input()), "context": dict(turn.read_context()), "schemaJson": turn.schema_json()}


def _namespace(produce: Callable[[NamespaceSession], Any]) -> Callable[[TemplateSession, _Clock], Any]:
    return lambda turn, _: produce(turn)


_PRODUCERS: dict[str, Callable[[TemplateSession, _Clock], Any]] = {
    **{name: _namespace(produce) for name, produce in MEMORY_NAMESPACES.items()},
    "session": _session,
    "input_params": lambda turn, _: dict(turn.read_params()),
    "context": lambda turn, _: dict(turn.read_context()),
    "schema_json": lambda turn, _: turn.schema_json(),
    "intent": lambda turn, _: turn.intent,
    "state": lambda turn, _: turn.state,
    "conversation_id": lambda turn, _: turn.conversation_id,
    "user_input": lambda turn, _: turn.user_text,
    "resolved_user_input": lambda turn, _: turn.resolved_input,
    "standalone_query": lambda turn, _: turn.standalone_query or "",
    "conversation_history": lambda turn, _: conversation_history(turn),
    "context_json": lambda turn, _: json.dumps(dict(turn.read_context()), default=str),
    "container_data": lambda turn, _: turn.read_context().get("container_data") or {},
    "pending_clarification": lambda turn, _: _clarification(turn.read_context()),
    "current_date": lambda _, clock: clock().date().isoformat(),
    "current_datetime": lambda _, clock: clock().isoformat(timespec="seconds"),
    "current_year": lambda _, clock: clock().year,
    "current_timezone": lambda _, clock: str(clock().tzinfo),
}
"""Each explicit variable (by canonical name), computed for a turn only when a template names it."""


def _flat_sources(turn: TemplateSession) -> tuple[Mapping[str, Any], ...]:
    """Where a name that is no explicit variable is looked up, in order (ConvEngine's flattening)."""
    facts = turn.facts_input()
    return session_fields(facts), facts.params, facts.context, facts.schema_json


def _flattened(sources: tuple[Mapping[str, Any], ...], name: str) -> tuple[bool, Any]:
    for source in sources:
        if name in source:
            return True, source[name]
    return False, None


def template_variables(turn: TemplateSession, extra: Mapping[str, Any] | None = None, *,
                       names: Iterable[str] | None = None) -> dict[str, Any]:
    """Variables for a template; with ``names``, only those (what the template refers to)."""
    extra = dict(extra or {})
    clock = _Clock()
    wanted = list(names) if names is not None else [*_CANONICAL, *_PRODUCERS]
    out: dict[str, Any] = {}
    sources: tuple[Mapping[str, Any], ...] | None = None  # built once, when a name needs them
    for name in wanted:
        if name in extra:
            out[name] = extra[name]
            continue
        key = _CANONICAL.get(name, name)
        produce = _PRODUCERS.get(key)
        if produce is not None:
            out[name] = produce(turn, clock)
            continue
        if sources is None:
            sources = _flat_sources(turn)
        found, value = _flattened(sources, name)
        if found:
            out[name] = value
    if names is None:
        out.update(extra)
    return out
