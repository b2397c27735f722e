"""EngineRuntime: an open engine on its event loop, its parts split by concern.

- :mod:`~convengine.engine.resources`: what it holds and closes (databases, saver, graph, locks, services, audit);
- :mod:`~convengine.engine.config_follow`: the configuration and version it serves, kept current;
- :mod:`~convengine.engine.turn`: running one turn (and seeding a conversation);
- :mod:`~convengine.engine.memory_ops`: undo and redo, long-term properties, erasure, steps, lifecycle;
- :mod:`~convengine.engine.reads`: access, audit, history, checkpointed state;
- :mod:`~convengine.engine.feedback_desk`: feedback stored and listed.

:class:`EngineRuntime` is those resources plus its parts; each of its methods hands the call to
the part that owns it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from convengine._internal.turn_io import TurnRequest
from convengine.audit import AuditBus, AuditEvent
from convengine.catalog import names
from convengine.catalog.state import EngineState
from convengine.checkpointing.timeline import UndoResult
from convengine.config_loader import ConfigSnapshot, Extensions
from convengine.engine import startup
from convengine.engine.config_follow import ConfigFollower
from convengine.engine.feedback import Feedback, FeedbackRequest
from convengine.engine.feedback_desk import FeedbackDesk
from convengine.engine.memory_ops import MemoryOps
from convengine.engine.reads import ConversationReads
from convengine.engine.resources import EngineResources, TurnGraph
from convengine.engine.results import EngineOptions, TurnResult
from convengine.engine.turn import TurnRunner
from convengine.nodes.context import StepHook
from convengine.templates.verbose import VerbosePublisher
from convengine.versions import Versions
from convengine.versions.lifecycle import sync_live
from convengine.versions.serving import Pick, VersionServing

__all__ = ["EngineRuntime", "TurnGraph"]


@dataclass(kw_only=True)
class EngineRuntime(EngineResources):
    """An open engine: its resources (inherited) and the parts that use them; built by :meth:`start`,
    released by :meth:`stop`."""

    config: ConfigFollower = field(init=False)
    turns: TurnRunner = field(init=False)
    reads: ConversationReads = field(init=False)
    memory: MemoryOps = field(init=False)
    feedbacks_desk: FeedbackDesk = field(init=False)
    versions_api: Versions | None = None
    """``engine.versions``: list, diff, draft, publish, rollback, channels (set by :meth:`start`)."""

    def __post_init__(self) -> None:
        self.config = ConfigFollower(self)
        self.turns = TurnRunner(self, self.config)
        self.reads = ConversationReads(self)
        self.memory = MemoryOps(self, self.reads)
        self.feedbacks_desk = FeedbackDesk(self, self.reads)

    # --- lifecycle --------------------------------------------------------------------

    @classmethod
    async def start(cls, raw_url: str, options: EngineOptions, bus: AuditBus) -> EngineRuntime:
        extensions = Extensions(frozenset(options.rule_types or ()), frozenset(options.rule_actions or ()))
        runtime = await cls.open(raw_url, options, bus, extensions)
        try:
            await asyncio.to_thread(_serve_versions, runtime, options, extensions)
        except BaseException:
            await runtime.stop()
            raise
        return runtime

    async def stop(self) -> None:
        await self.turns.drain()
        await self.close()

    @property
    def versions(self) -> VersionServing | None:
        """The version each turn runs on (set by :meth:`start`)."""
        return self.config.versions

    @property
    def verbose(self) -> tuple[ConfigSnapshot, VerbosePublisher] | None:
        """The ce_verbose publisher of the configuration the last turn ran on."""
        return self.turns.verbose

    async def reload(self) -> ConfigSnapshot:
        return await self.config.reload()

    def look_for_changes(self) -> None:
        self.config.look_for_changes()

    # --- turns, memory, reads, feedback ------------------------------------------------

    async def process(self, request: TurnRequest, owner: str | None = None, pick: Pick | None = None) -> TurnResult:
        return await self.turns.process(request, owner, pick)

    async def seed(self, conversation_id: str, values: dict[str, Any]) -> str:
        return await self.turns.seed(conversation_id, values)

    async def move(self, conversation_id: str, kind: str, owner: str | None = None) -> UndoResult:
        return await self.memory.move(conversation_id, kind, owner)

    async def properties(self, user_id: str, owner: str | None = None) -> dict[str, Any]:
        return await self.memory.properties(user_id, owner)

    async def forget_user(self, user_id: str, conversations: bool, owner: str | None = None) -> dict[str, int]:
        return await self.memory.forget_user(user_id, conversations, owner)

    async def steps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        return await self.memory.steps(conversation_id, owner)

    async def lifecycle(self, conversation_id: str, owner: str | None = None) -> str:
        return await self.memory.lifecycle(conversation_id, owner)

    async def check_access(self, conversation_id: str, owner: str | None,
                           conn: AsyncConnection | None = None) -> bool:
        return await self.reads.check_access(conversation_id, owner, conn)

    async def audit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]:
        return await self.reads.audit(conversation_id, owner)

    async def history(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        return await self.reads.history(conversation_id, owner)

    async def checkpointed_state(self, conversation_id: str, owner: str | None = None) -> EngineState:
        await self.turns.pruned(conversation_id)  # the state as its last turn's prune left it
        return await self.reads.checkpointed_state(conversation_id, owner)

    async def feedback(self, request: FeedbackRequest, owner: str | None = None) -> Feedback:
        return await self.feedbacks_desk.feedback(request, owner)

    async def feedbacks(self, conversation_id: str, owner: str | None = None) -> list[Feedback]:
        return await self.feedbacks_desk.feedbacks(conversation_id, owner)


def _serve_versions(runtime: EngineRuntime, options: EngineOptions, extensions: Extensions) -> None:
    """Serve the engine's channel; ``engine.versions`` for list/draft/publish/rollback."""
    sync_live(runtime.sync_engine)
    serving = VersionServing(runtime.sync_engine, runtime.async_engine, options.channel, options.settings,
                             extensions, audit_filter=runtime.audit_filter,
                             semantic=startup.version_semantic(options.embeddings, runtime.services.semantic))
    runtime.config.versions = serving
    serving.start()
    audit = StepHook(before=serving.audit_turn, steps=(names.LOAD_OR_CREATE_CONVERSATION,))
    runtime.services.hooks = (*runtime.services.hooks, audit)  # CONFIG_VERSION in each turn's first step
    runtime.versions_api = Versions(runtime.sync_engine, tests=options.conversation_tests, gate=options.test_gate,
                                    settings_overrides=options.settings, extensions=extensions,
                                    on_change=runtime.config.look_for_changes)
