"""One turn: admitted, run on its version under the conversation's lock, committed, then pruned."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_async_callback_manager_for_config
from sqlalchemy.ext.asyncio import AsyncConnection

from convengine._internal.turn_io import TurnRequest, database_detail, map_failure
from convengine.audit import TurnAudit
from convengine.catalog import names
from convengine.catalog import state as keys
from convengine.catalog.errors import (
    ConfigError,
    ConvEngineError,
    ConversationBusyError,
    ConversationNotFoundError,
    InvalidInputError,
    StepError,
)
from convengine.catalog.state import EngineState
from convengine.checkpointing import FirstRead, prune_checkpoints
from convengine.checkpointing.bound import Latest, commit_turn_connection
from convengine.checkpointing.hops import Prepared
from convengine.checkpointing.persistence import Write
from convengine.checkpointing.recent import latest_columns
from convengine.config_loader import ConfigSnapshot
from convengine.db import turn_connection
from convengine.engine.commit import commit_turn
from convengine.engine.config_follow import ConfigFollower
from convengine.engine.reads import not_found
from convengine.engine.resources import EngineResources, TurnGraph
from convengine.engine.results import Payload, TurnResult
from convengine.engine.turn_failure import all_writes, audit_failure
from convengine.memory import service as memory_service
from convengine.memory.pruning import prune_keeping_undo
from convengine.memory.service import Admission
from convengine.nodes.context import TurnContext
from convengine.settings import EngineSettings
from convengine.templates.verbose import VerbosePublisher
from convengine.versions.serving import Choice, Compiled, Pick, pin_of

logger = logging.getLogger(__name__)


def no_configuration(database: str) -> str:
    """The one-line reason a turn cannot run on a database whose control tables are empty."""
    return (f"the database {database} holds no configuration (its ce_* tables are empty): open it with a "
            "pack (Engine.open(url, pack='my_pack.yaml')) or import one (convengine pack import FILE --url URL)")


@dataclass
class TurnRunner:
    """Runs an engine's turns (and seeds a conversation's first state)."""

    resources: EngineResources
    config: ConfigFollower
    verbose: tuple[ConfigSnapshot, VerbosePublisher] | None = None
    """The ce_verbose publisher of the last configuration a turn ran on."""
    pruning: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Each conversation's prune running after its turn's reply (the next turn waits for it)."""

    async def process(self, request: TurnRequest, owner: str | None = None, pick: Pick | None = None) -> TurnResult:
        """One turn; with an ``owner``, only on a conversation that is new or belongs to that owner
        (checked under the turn lock: another owner's turn raises ConversationNotFoundError unrun).
        Admitted first (:mod:`convengine.engine.admission`): ServerBusyError, unrun, past the queue."""
        async with self.resources.gate.admit():
            return await self._process(request, owner, pick)

    async def _process(self, request: TurnRequest, owner: str | None, pick: Pick | None) -> TurnResult:
        await self.config.follow()
        try:
            return await self._locked(request, owner, pick)
        except _StoreFirst:
            # Set up outside the turn's transaction: the PostgreSQL store's setup builds indexes
            # CONCURRENTLY, which waits for every open transaction (the turn's own included).
            await self.resources.long_term_store()
            return await self._locked(request, owner, pick)

    async def _locked(self, request: TurnRequest, owner: str | None, pick: Pick | None) -> TurnResult:
        """Under the conversation's lock, in the turn's transaction: who may run it and on which version
        (one statement), then the graph run and its commit."""
        await self.pruned(request.conversation_id)
        ctx: TurnContext | None = None
        deferred: list[Write] = []
        first = FirstRead(_admission(self.resources.locks.engine.dialect), {"cid": request.conversation_id})
        try:
            async with (self.resources.locks.hold(request.conversation_id, self.resources.gate.work.working,
                                                  first) as conn,
                        _bound(conn) as deferred):
                admission, choice, latest = await self._admit(first.row, request, owner, pick)
                refused = _refusal(request.conversation_id, owner, admission) or admission.refused
                if refused is not None:
                    raise refused
                if not choice.snapshot.has_rows():
                    raise ConfigError(no_configuration(self.resources.url.redacted()))
                if choice.snapshot.settings.conversation_memory.long_term and self.resources.long_term is None:
                    raise _StoreFirst
                ctx = self._context(request, choice.compiled, owner)
                final = await self._run(conn, request, ctx, choice, admission, deferred, latest)
        except (ConversationBusyError, _StoreFirst):
            raise
        except Exception as exc:
            if ctx is None:  # refused, or failed before the turn started: nothing to roll back or audit
                if isinstance(exc, ConvEngineError):
                    raise
                logger.warning("the admission of a turn of %s could not be read: %s", request.conversation_id,
                               database_detail(exc))
                raise map_failure(exc) from exc
            error = await audit_failure(self.resources, request, ctx, exc, deferred)
            if error is exc:
                raise
            raise error from exc
        return _result(request.conversation_id, final, ctx.snapshot.settings)

    async def _admit(self, row: tuple[Any, ...] | None, request: TurnRequest, owner: str | None,
                     pick: Pick | None) -> tuple[Admission, Choice, Latest]:
        """The conversation's admission and the version of this turn, from the row the turn's lock read
        (its admission, its version pin and the id of its latest checkpoint: one statement)."""
        versions = self.config.versions
        assert versions is not None, "the engine serves its versions"
        cid = request.conversation_id
        assert row is not None, "the admission statement reads one row, whether or not the conversation exists"
        admission = memory_service.judge(row, request, owner)
        choice = await versions.choose_pinned(row[4], request.reset, pick)
        versions.remember(request.turn_id, choice)  # audited as the turn's first step starts
        return admission, choice, Latest(cid, None if row[6] else row[5], absent=row[5] is None and not row[6])

    async def _run(self, conn: AsyncConnection | None, request: TurnRequest, ctx: TurnContext,
                   choice: Choice, admission: Admission, deferred: list[Write], latest: Latest) -> EngineState:
        """The graph run and its commit (with the conversation's version pin), under the conversation's lock."""
        resources, snapshot = self.resources, choice.snapshot
        config: RunnableConfig = {"configurable": {"thread_id": request.conversation_id},
                                  "metadata": {"convengine_turn": request.turn_id},
                                  "recursion_limit": snapshot.settings.recursion_limit}
        graph_input: EngineState = {keys.CONVERSATION_ID: request.conversation_id,
                                     keys.TURN_INPUT: {"text": request.text, "params": request.params,
                                                       "reset": request.reset, "turn_id": request.turn_id,
                                                       "event": request.event}}
        async with resources.saver.bind(conn, latest):
            await memory_service.before_run(conn, admission, ctx)
            await _run_graph(resources.graph, graph_input, config, ctx)
            final = _final_state(ctx)
            memory_rows = await memory_service.after_run(conn, request, dict(final), ctx, snapshot.settings,
                                                         admission.owner)
            await commit_turn(resources.store, conn, conversation_id=ctx.conversation_id, final=final,
                              events=ctx.audit.events, owner=ctx.owner,
                              extra=memory_rows.followed_by(
                                  all_writes(choice.pin_write(request.conversation_id), *deferred)))
        memory_service.publish_deferred(ctx, resources.bus)
        self._prune_later(request.conversation_id, int(final.get(keys.TURN) or 0), snapshot.settings)
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

    def _prune_later(self, conversation_id: str, turn: int, settings: EngineSettings) -> None:
        """Every ``checkpoint_prune_every`` turns keep only the latest checkpoint (with undo on: the ones
        undo and redo can still reach), so the saver's reads (which join a thread's blobs) stay as cheap
        at turn 1,000 as at turn 1. Started once the turn has committed and run after its reply; the
        conversation's next turn in this process waits for it. Best effort."""
        every = settings.checkpoint_prune_every
        if every and not turn % every and conversation_id not in self.pruning:
            task = asyncio.create_task(self._prune(conversation_id, settings.conversation_memory.undo_depth))
            self.pruning[conversation_id] = task
            task.add_done_callback(lambda _: self.pruning.pop(conversation_id, None))

    async def pruned(self, conversation_id: str) -> None:
        """Wait for the conversation's prune, if one is running (its next turn, a read of its state)."""
        task = self.pruning.get(conversation_id)
        if task is not None:
            await asyncio.shield(task)

    async def drain(self) -> None:
        """Wait for every running prune (the engine is closing)."""
        if self.pruning:
            await asyncio.gather(*self.pruning.values(), return_exceptions=True)

    async def _prune(self, conversation_id: str, undo_depth: int) -> None:
        """Under the conversation's lock (no turn of another process moves its head meanwhile)."""
        shared = self.resources.saver.shared
        try:
            async with self.resources.locks.hold(conversation_id):
                self.resources.saver.forget(conversation_id)  # the kept checkpoint loses its parent
                if undo_depth:
                    await prune_keeping_undo(shared, conversation_id, undo_depth)
                else:
                    await prune_checkpoints(shared, conversation_id)
        except Exception as exc:  # noqa: BLE001 - a missed prune only delays the next one
            logger.warning("pruning the checkpoints of %s failed: %s", conversation_id, database_detail(exc))

    async def seed(self, conversation_id: str, values: dict[str, Any]) -> str:
        """A new conversation's first state (before its first message)."""
        config: RunnableConfig = {"configurable": {"thread_id": conversation_id}}
        resources = self.resources
        async with resources.locks.hold(conversation_id) as conn, resources.saver.bind(conn):
            snap = await resources.graph.aget_state(config)
            if (snap.values or {}).get(keys.TURN):
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


class _StoreFirst(Exception):
    """The turn needs the long-term store, which is set up outside any transaction: start again."""


_NO_OUTPUT: list[str] = []


async def _run_graph(graph: TurnGraph, graph_input: EngineState, config: RunnableConfig, ctx: TurnContext) -> None:
    """The turn's graph run. The node that hands over to the end records the final state on the turn's
    context (``TurnContext.final_state``), so unless a callback handler watches the run, LangGraph
    is asked for no output: it does not read and emit every channel after each step. A watched run
    (a LangSmith trace, which shows the final state as the turn's output) streams the state as before."""
    watched = get_async_callback_manager_for_config(config).handlers
    await graph.ainvoke(graph_input, config, context=ctx, durability="exit", version="v2",
                        output_keys=None if watched else _NO_OUTPUT)


def _final_state(ctx: TurnContext) -> EngineState:
    final = ctx.final_state
    if final is None:  # every run of the turn graph ends through a step that routes to its end
        raise StepError("the turn's graph finished without a step handing over to its end")
    return cast(EngineState, final)


def _result(conversation_id: str, final: EngineState, settings: EngineSettings) -> TurnResult:
    """What the caller gets: the reply a FINAL transformer made, else the stored answer."""
    payload = final.get(keys.REPLY) or final.get(keys.PAYLOAD) or {"type": "TEXT", "value": None}
    return TurnResult(conversation_id, final.get(keys.INTENT) or "", final.get(keys.STATE) or "",
                      Payload.from_state(payload), dict(final.get(keys.CONTEXT) or {}), int(final.get(keys.TURN) or 0),
                      final.get(keys.STATUS) or "RUNNING", memory_service.lifecycle_of(final.get(keys.STATE), settings))


def _admission(dialect: sa.Dialect) -> Prepared:
    """The turn's first statement (compiled once per dialect, so each turn only binds its conversation
    id and the driver runs it): the conversation's admission row, its version pin and the id of its
    latest checkpoint."""
    key = (dialect.name, dialect.driver, dialect.paramstyle)
    prepared = _ADMISSION.get(key)
    if prepared is None:
        cid: sa.BindParameter[Any] = sa.bindparam("cid")  # typed by each comparison (a uuid column)
        thread: sa.BindParameter[str] = sa.bindparam("cid", type_=sa.Text())  # the savers' text thread ids
        select = memory_service.admission_query(cid, pin_of(cid), *latest_columns(thread, dialect.name))
        prepared = _ADMISSION[key] = Prepared(select, dialect)
    return prepared


_ADMISSION: dict[tuple[str, str, str], Prepared] = {}


def _refusal(conversation_id: str, owner: str | None, admission: Admission) -> ConversationNotFoundError | None:
    """Why ``owner`` may not run a turn here (another owner's conversation), or None: decided on the
    owner :func:`~convengine.memory.service.admit` read under the turn lock, in the turn's transaction."""
    if owner is None or not admission.exists or admission.owner == owner:
        return None
    return not_found(conversation_id)
