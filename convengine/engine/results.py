"""What an engine is opened with and what a turn returns: plain values, no engine machinery."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from convengine.catalog.defaults import LIVE_CHANNEL
from convengine.nodes.common import Step
from convengine.nodes.context import StepHook
from convengine.rules.actions import ActionHandler
from convengine.rules.engine import MatchType
from convengine.versions.lifecycle import TestGate


@dataclass(frozen=True, slots=True)
class Payload:
    """The assistant's answer: ``type`` TEXT, JSON (or JSON_TEXT), and its value."""

    type: str
    value: Any
    sources: tuple[dict[str, Any], ...] | None = None
    """The passages a knowledge answer came from (kb, source, title, position, score)."""

    @classmethod
    def from_state(cls, payload: Mapping[str, Any]) -> Payload:
        """The payload as the turn's state holds it (``{type, value, sources?}``)."""
        sources = payload.get("sources")
        return cls(payload.get("type", "TEXT"), payload.get("value"), tuple(sources) if sources else None)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one turn returns."""

    conversation_id: str
    intent: str
    state: str
    payload: Payload
    context: dict[str, Any]
    turn: int
    status: str = "RUNNING"
    lifecycle: str = "IN_PROGRESS"
    """IN_PROGRESS, or ENDED when the pack's ``conversation_memory.end_states`` ended the conversation."""

    @property
    def text(self) -> str:
        value = self.payload.value
        return value if isinstance(value, str) else str(value)


Handler = Callable[..., Any]
"""A host-registered callable (task, tool handler, tool adapter, transformer, container provider)."""


@dataclass
class EngineOptions:
    """Everything :meth:`Engine.open` accepts besides the URL."""

    pack: str | Path | Mapping[str, Any] | None = None
    replace: bool = False
    """Import ``pack`` even when the database holds a different configuration (otherwise refused with
    :class:`~convengine.config_loader.loader.ConfigurationExistsError`, naming what would change)."""
    llm: Any = None
    """A LangChain chat model, a ScriptedLLM, an LlmGateway or ``"openai"``."""
    tasks: Mapping[str, Any] | None = None
    """``bean:method`` -> callable, or ``bean`` -> an object whose methods are the tasks."""
    tools: Mapping[str, Handler] | None = None
    tool_adapters: Mapping[str, Handler] | None = None
    steps: Iterable[Step] = ()
    hooks: Iterable[StepHook] = ()
    rule_types: Mapping[str, MatchType] | None = None
    rule_actions: Mapping[str, ActionHandler] | None = None
    response_transformers: Mapping[tuple[str, str, str], Handler] | None = None
    container_providers: Mapping[str, Handler] | None = None
    clock: Callable[[], float] | None = None
    embeddings: Embeddings | None = None
    """A LangChain ``Embeddings`` model for knowledge search and SEMANTIC classifiers."""
    knowledge_bases: Mapping[str, Any] | None = None
    """LangChain retrievers or vector stores searched as knowledge bases of these names (fallback,
    flow knowledge nodes, ``engine.knowledge.search``); they shadow stored bases of the same name."""
    settings: dict[str, Any] = field(default_factory=dict)
    channel: str = LIVE_CHANNEL
    """The configuration channel new conversations get (``production``: the published version)."""
    conversation_tests: tuple[str | Path, ...] = ()
    """``*.conv.yaml`` files or directories ``engine.versions.publish()`` runs against the draft."""
    test_gate: TestGate | None = None
    """What runs ``conversation_tests`` (default: on engines opened like this one)."""

    @classmethod
    def from_keywords(cls, options: Mapping[str, Any]) -> EngineOptions:
        """Known options by name; ``settings=`` (a mapping) and any other keyword are EngineSettings fields."""
        known = set(cls.__dataclass_fields__) - {"settings"}
        picked = {k: v for k, v in options.items() if k in known}
        settings = dict(options.get("settings") or {})
        settings.update({k: v for k, v in options.items() if k not in known and k != "settings"})
        return cls(**picked, settings=settings)
