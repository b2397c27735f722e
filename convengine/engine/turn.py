"""One turn: admitted, run on its version under the conversation's lock, committed, then pruned."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine._internal.turn_io import TurnRequest, database_detail, map_failure
from convengine.audit import TurnAudit
from convengine.catalog import names
from convengine.catalog.errors import (
    ConvEngineError,
    ConversationBusyError,
    ConversationNotFoundError,
    InvalidInputError,
)
from convengine.catalog.state import EngineState
from convengine.checkpointing import prune_checkpoints
from convengine.checkpointing.bound import commit_turn_connection
from convengine.checkpointing.persistence import Write
from convengine.config_loader import ConfigSnapshot
from convengine.db import turn_connection
from convengine.engine.commit import commit_turn
from convengine.engine.config_follow import ConfigFollower
from convengine.engine.reads import not_found
from convengine.engine.resources import EngineResources
from convengine.engine.results import Payload, TurnResult
from convengine.engine.turn_failure import all_writes, audit_failure
from convengine.memory import service as memory_service
from convengine.memory.pruning import prune_keeping_undo
from convengine.memory.service import Admission
from convengine.nodes.context import TurnContext
from convengine.settings import EngineSettings
from convengine.templates.verbose import VerbosePublisher
from convengine.versions.serving import Choice, Compiled, Pick

logger = logging.getLogger(__name__)


@dataclass
class TurnRunner:
    """Runs an engine's turns (and seeds a conversation's first state)."""

    resources: EngineResources
    config: ConfigFollower
    verbose: tuple[ConfigSnapshot, VerbosePublisher] | None = None
    """The ce_verbose publisher of the last configuration a turn ran on."""

    async def process(self, request: TurnRequest, owner: str | None = None, pick: Pick | None = None) -> TurnResult:
        """One turn; with an ``owner``, only on a conversation that is new or belongs to that owner
        (checked under the turn lock: another owner's turn raises ConversationNotFoundError unrun).
        Admitted first (:mod:`convengine.engine.admission`): ServerBusyError, unrun, past the queue."""
        async with self.resources.gate.admit():
            return await self._process(request, owner, pick)

    async def _process(self, request: TurnRequest, owner: str | None, pick: Pick | None) -> TurnResult:
        await self.config.follow()
        choice = await self._choose(request, pick)
        snapshot = choice.snapshot
        ctx = self._context(request, choice.compiled, owner)
        if snapshot.settings.conversation_memory.long_term:
            # Set up before the turn's transaction: the PostgreSQL store's setup builds indexes
            # CONCURRENTLY, which waits for every open transaction (the turn's own included).
            await self.resources.long_term_store()
        refused: ConvEngineError | None = None
        deferred: list[Write] = []
        try:
            async with self.resources.locks.hold(request.conversation_id) as conn, _bound(conn) as deferred:
                admission = await memory_service.admit(conn, request, owner)
                refused = _refusal(request.conversation_id, owner, admission) or admission.refused
                if refused is None:
                    final = await self._run(conn, request, ctx, choice, admission, deferred)
        except ConversationBusyError:
            raise
        except Exception as exc:
            error = await audit_failure(self.resources, request, ctx, exc, deferred)
            if error is exc:
                raise
            raise error from exc
        if refused is not None:
            raise refused
        return _result(request.conversation_id, final, snapshot.settings)

    async def _choose(self, request: TurnRequest, pick: Pick | None) -> Choice:
        """The version the conversation is pinned to (or the draft / a version asked for)."""
        versions = self.config.versions
        assert versions is not None, "the engine serves its versions before any turn runs"
        try:
            choice = await versions.choose(request.conversation_id, request.reset, pick)
        except ConvEngineError:
            raise
        except Exception as exc:  # the pin is read before the turn starts: nothing to roll back or audit
            logger.warning("the version pin of %s could not be read: %s", request.conversation_id,
                           database_detail(exc))
            raise map_failure(exc) from exc
        versions.remember(request.turn_id, choice)  # audited as the turn's first step starts
        return choice

    async def _run(self, conn: AsyncConnection | None, request: TurnRequest, ctx: TurnContext,
                   choice: Choice, admission: Admission, deferred: list[Write]) -> EngineState:
        """The graph run and its commit (with the conversation's version pin), under the conversation's lock."""
        resources, snapshot = self.resources, choice.snapshot
        config: RunnableConfig = {"configurable": {"thread_id": request.conversation_id},
                                  "metadata": {"convengine_turn": request.turn_id},
                                  "recursion_limit": snapshot.settings.recursion_limit}
        graph_input: EngineState = {"conversation_id": request.conversation_id,
                       "turn_input": {"text": request.text, "params": request.params, "reset": request.reset,
                                      "turn_id": request.turn_id, "event": request.event}}
        async with resources.saver.bind(conn):
            await memory_service.before_run(conn, admission, ctx, snapshot.settings)
            final = cast(EngineState, await resources.graph.ainvoke(graph_input, config, context=ctx,
                                                                    durability="exit"))
            memory_rows = await memory_service.after_run(conn, request, dict(final), ctx, snapshot.settings,
                                                         admission.owner)
            await commit_turn(resources.store, conn, conversation_id=ctx.conversation_id, final=final,
                              events=ctx.audit.events, owner=ctx.owner,
                              extra=all_writes(memory_rows, choice.pin_write(request.conversation_id), *deferred))
        memory_service.publish_deferred(ctx, resources.bus)
        await self._prune(request.conversation_id, int(final.get("turn") or 0), snapshot.settings)
        return final

    def _context(self, request: TurnRequest, compiled: Compiled, owner: str | None) -> TurnContext:
        """The turn's context on its version: that version's snapshot, audit filter and SEMANTIC index."""
        snapshot = compiled.snapshot
        # With secret properties declared, live events wait for the commit, which masks them.
        live = None if snapshot.settings.conversation_memory.secret else self.resources.bus
        audit = TurnAudit(request.conversation_id, audit_filter=compiled.audit_filter, bus=live,
                          persist_meta=snapshot.settings.audit.persist_meta, turn_id=request.turn_id)
        audit.verbose = self._verbose_for(snapshot)
        return TurnContext(snapshot=snapshot, services=self.resources.services, audit=audit,
                           conversation_id=request.conversation_id, turn_id=request.turn_id, owner=owner,
                           user_id=request.user_id, semantic=compiled.semantic)

    def _verbose_for(self, snapshot: ConfigSnapshot) -> VerbosePublisher:
        """The ce_verbose publisher of ``snapshot`` (built once per configuration)."""
        if self.verbose is None or self.verbose[0] is not snapshot:
            self.verbose = (snapshot, VerbosePublisher(snapshot.verbose, snapshot.settings))
        return self.verbose[1]

    async def _prune(self, conversation_id: str, turn: int, settings: EngineSettings) -> None:
        """Every ``checkpoint_prune_every`` turns keep only the latest checkpoint (with undo on: the ones
        undo and redo can still reach), so the saver's reads (which join a thread's blobs) stay as cheap
        at turn 1,000 as at turn 1. Best effort."""
        every = settings.checkpoint_prune_every
        if not every or turn % every:
            return
        shared = self.resources.saver.shared
        try:
            depth = settings.conversation_memory.undo_depth
            if depth:
                await prune_keeping_undo(shared, conversation_id, depth)
                return
            await prune_checkpoints(shared, conversation_id)
        except Exception as exc:  # noqa: BLE001 - a missed prune only delays the next one
            logger.warning("pruning the checkpoints of %s failed: %s", conversation_id, database_detail(exc))

    async def seed(self, conversation_id: str, values: dict[str, Any]) -> str:
        """A new conversation's first state (before its first message)."""
        config: RunnableConfig = {"configurable": {"thread_id": conversation_id}}
        resources = self.resources
        async with resources.locks.hold(conversation_id) as conn, resources.saver.bind(conn):
            snap = await resources.graph.aget_state(config)
            if (snap.values or {}).get("turn"):
                raise InvalidInputError(f"conversation {conversation_id} has already started; seed it before its "
                                        "first message")
            await resources.graph.aupdate_state(config, values, as_node=names.LOAD_OR_CREATE_CONVERSATION)
            if conn is not None:
                await commit_turn_connection(conn)
        return conversation_id


@contextlib.asynccontextmanager
async def _bound(conn: AsyncConnection | None) -> AsyncIterator[list[Write]]:
    """The turn's connection made current (see :mod:`convengine.db.turn_connection`); yields the
    writes deferred to its commit (the LLM call log), which a failed turn writes with its audit."""
    if conn is None:
        yield []
        return
    with turn_connection.bound(conn) as turn:
        yield turn.deferred


def _result(conversation_id: str, final: EngineState, settings: EngineSettings) -> TurnResult:
    """What the caller gets: the reply a FINAL transformer made, else the stored answer."""
    payload = final.get("reply") or final.get("payload") or {"type": "TEXT", "value": None}
    return TurnResult(conversation_id, final.get("intent") or "", final.get("state") or "",
                      Payload.from_state(payload), dict(final.get("context") or {}), int(final.get("turn") or 0),
                      final.get("status") or "RUNNING", memory_service.lifecycle_of(final.get("state"), settings))


def _refusal(conversation_id: str, owner: str | None, admission: Admission) -> ConversationNotFoundError | None:
    """Why ``owner`` may not run a turn here (another owner's conversation), or None: decided on the
    owner :func:`~convengine.memory.service.admit` read under the turn lock, in the turn's transaction."""
    if owner is None or not admission.exists or admission.owner == owner:
        return None
    return not_found(conversation_id)
