"""The LangGraph runtime context of a turn: engine services plus this turn's collectors.

Nothing here is checkpointed: the snapshot, LLM gateway, tool registry, task registry and
audit collector travel in ``Runtime.context``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from convengine.audit.collector import TurnAudit
from convengine.config.snapshot import ConfigSnapshot
from convengine.registry import Registries
from convengine.rules.engine import RuleRegistry
from convengine.settings import EngineSettings

if TYPE_CHECKING:  # only to name the services: importing them loads httpx, psycopg, numpy at `import convengine`
    from convengine.checkpointing.persistence import ConversationStore
    from convengine.knowledge.search import Retriever
    from convengine.knowledge.semantic import SemanticIndex
    from convengine.llm.gateway import LlmGateway
    from convengine.tools.runner import ToolRunner


@dataclass(slots=True)
class Services:
    """Engine-wide collaborators shared by every turn."""

    registries: Registries
    rule_registry: RuleRegistry
    store: ConversationStore | None = None
    llm: LlmGateway | None = None
    hooks: tuple[Any, ...] = ()
    clock: Callable[[], float] | None = None
    """Epoch milliseconds (pending-action TTLs); tests inject a fake clock."""
    tools: ToolRunner | None = None
    retriever: Retriever | None = None
    """Knowledge search (fallback answers, SEMANTIC classifiers), with the engine's embeddings."""
    semantic: SemanticIndex | None = None
    """SEMANTIC example embeddings of the configuration loaded at start (None without an embeddings model);
    the engine's turns use the index of the version each runs on (``TurnContext.semantic``)."""


@dataclass(slots=True)
class TurnContext:
    """``Runtime.context`` for one turn."""

    snapshot: ConfigSnapshot
    services: Services
    audit: TurnAudit
    conversation_id: str
    turn_id: str
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    owner: str | None = None
    """The HTTP caller this turn runs for (stored on a new conversation); None for host code."""
    user_id: str | None = None
    """The end user of the conversation (``user_id`` / ``userId``), when one was given."""
    autocommit: bool = False
    """No Engine runs this turn (Studio): a new conversation's row is written when it starts, and the
    graph's last node commits the turn (convengine.studio)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Scratch space for the host's custom steps and hooks (not checkpointed); the engine keeps out of it."""
    context_before: dict[str, Any] | None = None
    """The context as the turn found it (kept by load_or_create_conversation): what ENGINE_RETURN's
    ``contextChanges`` compares the turn's context with. None until that step ran."""
    has_row: bool | None = None
    """Whether the conversation's ``ce_conversation`` row existed when the turn took its lock (read in
    its admission); None when nobody read it (Studio). False spares a new conversation the adoption query."""
    long_term_loaded: dict[str, Any] | None = None
    """The user's long-term properties, loaded by conversation memory for a new conversation before the
    graph runs and merged into its context after load_or_create_conversation."""
    secret_values: list[str] = field(default_factory=list)
    """The values of the turn's secret properties, gathered as they are taken out before it is persisted:
    its audit batch and LLM call log are masked with them."""
    semantic: SemanticIndex | None = None
    """The SEMANTIC example embeddings of the version this turn runs on (None: the services' index)."""
    final_state: dict[str, Any] | None = None
    """The state the turn's graph ended with, recorded by the node that hands over to the graph's end
    (the engine reads it here rather than have LangGraph stream the whole state after every step)."""

    @property
    def semantic_index(self) -> SemanticIndex | None:
        return self.semantic if self.semantic is not None else self.services.semantic

    @property
    def settings(self) -> EngineSettings:
        return self.snapshot.settings


Hook = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class StepHook:
    """Before/after/error callbacks for steps (``steps`` empty = every step).

    Each callback receives ``(step_name, turn)``; ``on_error`` also gets the exception.
    A hook that raises is audited as ``STEP_HOOK_ERROR`` and never breaks the turn.
    """

    before: Hook | None = None
    after: Hook | None = None
    on_error: Hook | None = None
    steps: tuple[str, ...] = ()

    def applies(self, step: str) -> bool:
        return not self.steps or step in self.steps


def mapping_or_empty(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
