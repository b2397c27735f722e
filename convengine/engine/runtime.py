"""EngineRuntime: the resources of an open engine, living on its event loop, and the turn itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from convengine._internal.turn_io import TurnRequest, database_detail, failure_event, map_failure
from convengine.audit import AuditBus, AuditEvent, AuditFilter, TurnAudit
from convengine.catalog import names
from convengine.catalog import state as keys
from convengine.catalog.errors import (
    ConfigError,
    ConvEngineError,
    ConversationBusyError,
    ConversationNotFoundError,
    ErrorCode,
    InvalidInputError,
)
from convengine.catalog.state import EngineState
from convengine.checkpointing import TurnLocks, open_saver, prune_checkpoints
from convengine.checkpointing.bound import TurnSaver, commit_turn_connection
from convengine.checkpointing.persistence import ConversationStore, Write, insert_events
from convengine.checkpointing.timeline import UndoResult
from convengine.config_loader import ConfigSnapshot, Extensions, SnapshotHolder, import_pack, stamp
from convengine.db import (
    create_async_sa_engine,
    create_sync_engine,
    parse_database_url,
    turn_connection,
    upgrade,
)
from convengine.db.engines import pool_size_for
from convengine.db.url import DatabaseUrl
from convengine.engine import feedback as fb
from convengine.engine.admission import AdmissionLimits, TurnGate
from convengine.engine.commit import commit_turn
from convengine.engine.feedback import Feedback, FeedbackRequest
from convengine.engine.results import EngineOptions, Payload, TurnResult
from convengine.graph.builder import build_graph, compile_graph
from convengine.knowledge.search import Retriever, SearchSettings
from convengine.knowledge.semantic import SemanticIndex
from convengine.llm.gateway import as_gateway
from convengine.memory import longterm
from convengine.memory import scopes as memory_scopes
from convengine.memory import service as memory_service
from convengine.memory.longterm import open_store
from convengine.memory.pruning import prune_keeping_undo
from convengine.memory.service import Admission
from convengine.nodes.context import Services, StepHook, TurnContext
from convengine.registry import Registries, TaskRegistry
from convengine.rules.engine import RuleRegistry
from convengine.settings import EngineSettings
from convengine.templates.verbose import VerbosePublisher
from convengine.tools.db import DbRunner
from convengine.tools.http import HttpRunner
from convengine.tools.mcp_servers import McpServers
from convengine.tools.runner import ToolRunner
from convengine.versions import Versions
from convengine.versions.lifecycle import record_import, sync_live
from convengine.versions.serving import Choice, Compiled, Pick, SemanticBuilder, VersionServing

logger = logging.getLogger(__name__)

TurnGraph = CompiledStateGraph[EngineState, TurnContext, EngineState, EngineState]
"""The compiled turn graph (with the engine's checkpointer)."""


@dataclass(kw_only=True)
class EngineRuntime:
    """The resources of an open engine; built by :meth:`start`, released by :meth:`stop`."""

    url: DatabaseUrl
    holder: SnapshotHolder
    sync_engine: sa.Engine
    async_engine: AsyncEngine
    store: ConversationStore
    saver: TurnSaver
    saver_stack: contextlib.AsyncExitStack
    graph: TurnGraph
    locks: TurnLocks
    services: Services
    bus: AuditBus
    audit_filter: AuditFilter
    gate: TurnGate
    """Admission: the turns this process runs at once and the queue of the others (sized from the pool)."""
    stamp_checked_at: float = 0.0
    verbose: tuple[ConfigSnapshot, VerbosePublisher] | None = None
    long_term: BaseStore | None = None
    """LangGraph's store (SQLite or PostgreSQL) holding users' long-term properties, opened (and its
    tables set up) the first time a memory feature needs it: importing it costs startup time."""
    _store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    versions: VersionServing | None = None
    """The version each turn runs on (set by :meth:`start`)."""
    versions_api: Versions | None = None
    """``engine.versions``: list, diff, draft, publish, rollback, channels (set by :meth:`start`)."""

    # --- lifecycle --------------------------------------------------------------------

    @classmethod
    async def start(cls, raw_url: str, options: EngineOptions, bus: AuditBus) -> EngineRuntime:
        base = EngineSettings.build(**options.settings)
        url = parse_database_url(raw_url)
        _check_tables(base)
        sync_engine = await asyncio.to_thread(create_sync_engine, url)
        extensions = Extensions(frozenset(options.rule_types or ()), frozenset(options.rule_actions or ()))
        holder = SnapshotHolder(sync_engine, dict(options.settings), extensions)
        await asyncio.to_thread(_prepare, sync_engine, base, options.pack, extensions, holder)
        settings = holder.current.settings
        pool = pool_size_for(url, settings.pool)
        async_engine = await asyncio.to_thread(partial(create_async_sa_engine, url, pool=pool))
        stack = contextlib.AsyncExitStack()
        try:
            saver = TurnSaver(await stack.enter_async_context(open_saver(url)))
            store = ConversationStore(async_engine, sync_engine)
            services = _services(options, holder.current, store)
        except BaseException:
            await stack.aclose()
            await async_engine.dispose()
            sync_engine.dispose()
            raise
        services.tools = _tool_runner(services.registries, sync_engine, holder.current.settings)
        graph = compile_graph(build_graph(options.steps), checkpointer=saver)
        locks = TurnLocks(url, async_engine, holder.current.settings.turn_lock_timeout_s)
        if not url.is_postgres:
            await asyncio.to_thread(locks.lock_folder)
        runtime = cls(url=url, holder=holder, sync_engine=sync_engine, async_engine=async_engine, store=store,
                      saver=saver, saver_stack=stack, graph=graph, locks=locks, services=services, bus=bus,
                      audit_filter=AuditFilter(holder.current.settings.audit),
                      gate=TurnGate(AdmissionLimits.of(settings.admission, pool.capacity)))
        try:
            await asyncio.to_thread(_versions_hook, runtime, options, extensions)
        except BaseException:
            await runtime.stop()
            raise
        return runtime

    async def stop(self) -> None:
        if self.services.tools is not None:
            await self.services.tools.aclose()
        await self.saver_stack.aclose()
        await self.async_engine.dispose()
        self.sync_engine.dispose()

    async def reload(self) -> ConfigSnapshot:
        """Reload the configuration here and in every other process (cache refresh)."""
        await asyncio.to_thread(sync_live, self.sync_engine)  # direct table edits become a version
        return self._apply(await asyncio.to_thread(self.holder.refresh))

    def _apply(self, snapshot: ConfigSnapshot) -> ConfigSnapshot:
        if self.versions is not None:  # re-read the channel before the next turn
            self.versions.changed()
        self.audit_filter.settings = snapshot.settings.audit
        self.locks.timeout_s = snapshot.settings.turn_lock_timeout_s
        return snapshot

    def look_for_changes(self) -> None:
        """Check the configuration stamp before the next turn (a change was just made)."""
        self.stamp_checked_at = 0.0

    async def _follow_changes(self) -> None:
        """Reload when another process imported or refreshed the configuration (checked at most
        every ``stamp.CHECK_INTERVAL_S``; a rejected configuration keeps the current one)."""
        now = time.monotonic()
        if now - self.stamp_checked_at < stamp.CHECK_INTERVAL_S:
            return
        self.stamp_checked_at = now
        try:
            if self.holder.is_stale(await stamp.aread(self.async_engine)):
                self._apply(await asyncio.to_thread(self.holder.reload, raise_on_error=False))
        except (SQLAlchemyError, OSError) as exc:  # the turn itself reports a database that is gone
            logger.warning("could not check for a configuration change: %s", database_detail(exc))

    # --- a turn -----------------------------------------------------------------------

    async def process(self, request: TurnRequest, owner: str | None = None, pick: Pick | None = None) -> TurnResult:
        """One turn; with an ``owner``, only on a conversation that is new or belongs to that owner
        (checked under the turn lock: another owner's turn raises ConversationNotFoundError unrun).
        Admitted first (:mod:`convengine.engine.admission`): ServerBusyError, unrun, past the queue."""
        async with self.gate.admit():
            return await self._process(request, owner, pick)

    async def _process(self, request: TurnRequest, owner: str | None, pick: Pick | None) -> TurnResult:
        await self._follow_changes()
        # the version the conversation is pinned to (or the draft / a version asked for)
        versions = self.versions
        assert versions is not None, "start() serves the versions before any turn runs"
        try:
            choice = await versions.choose(request.conversation_id, request.reset, pick)
        except ConvEngineError:
            raise
        except Exception as exc:  # the pin is read before the turn starts: nothing to roll back or audit
            logger.warning("the version pin of %s could not be read: %s", request.conversation_id,
                           database_detail(exc))
            raise map_failure(exc) from exc
        versions.remember(request.turn_id, choice)  # audited as the turn's first step starts
        snapshot = choice.snapshot
        ctx = self._context(request, choice.compiled, owner)
        if snapshot.settings.conversation_memory.long_term:
            # Set up before the turn's transaction: the PostgreSQL store's setup builds indexes
            # CONCURRENTLY, which waits for every open transaction (the turn's own included).
            await self.long_term_store()
        refused: ConvEngineError | None = None
        deferred: list[Write] = []
        try:
            async with self.locks.hold(request.conversation_id) as conn, self._bound(conn) as deferred:
                admission = await memory_service.admit(conn, request, owner)
                refused = _refusal(request.conversation_id, owner, admission) or admission.refused
                if refused is None:
                    final = await self._run(conn, request, ctx, choice, admission, deferred)
        except ConversationBusyError:
            raise
        except Exception as exc:
            error = await self._failed(request, ctx, exc, deferred)
            if error is exc:
                raise
            raise error from exc
        if refused is not None:
            raise refused
        return _result(request.conversation_id, final, snapshot.settings)

    @contextlib.asynccontextmanager
    async def _bound(self, conn: AsyncConnection | None) -> AsyncIterator[list[Write]]:
        """The turn's connection made current (see :mod:`convengine.db.turn_connection`); yields the
        writes deferred to its commit (the LLM call log), which a failed turn writes with its audit."""
        if conn is None:
            yield []
            return
        with turn_connection.bound(conn) as turn:
            yield turn.deferred

    async def _run(self, conn: AsyncConnection | None, request: TurnRequest, ctx: TurnContext,
                   choice: Choice, admission: Admission, deferred: list[Write]) -> EngineState:
        """The graph run and its commit (with the conversation's version pin), under the conversation's lock."""
        snapshot = choice.snapshot
        config: RunnableConfig = {"configurable": {"thread_id": request.conversation_id},
                                  "metadata": {"convengine_turn": request.turn_id},
                                  "recursion_limit": snapshot.settings.recursion_limit}
        graph_input: EngineState = {keys.CONVERSATION_ID: request.conversation_id,
                       keys.TURN_INPUT: {"text": request.text, "params": request.params, "reset": request.reset,
                                      "turn_id": request.turn_id, "event": request.event}}
        async with self.saver.bind(conn):
            await memory_service.before_run(conn, admission, ctx, snapshot.settings)
            final = cast(EngineState, await self.graph.ainvoke(graph_input, config, context=ctx, durability="exit"))
            memory_rows = await memory_service.after_run(conn, request, dict(final), ctx, snapshot.settings,
                                                         admission.owner)
            await commit_turn(self.store, conn, conversation_id=ctx.conversation_id, final=final,
                              events=ctx.audit.events, owner=ctx.owner,
                              extra=_all(memory_rows, choice.pin_write(request.conversation_id), *deferred))
        memory_service.publish_deferred(ctx, self.bus)
        await self._prune(request.conversation_id, int(final.get(keys.TURN) or 0), snapshot.settings)
        return final

    def _context(self, request: TurnRequest, compiled: Compiled, owner: str | None) -> TurnContext:
        """The turn's context on its version: that version's snapshot, audit filter and SEMANTIC index."""
        snapshot = compiled.snapshot
        # With secret properties declared, live events wait for the commit, which masks them.
        live = None if snapshot.settings.conversation_memory.secret else self.bus
        audit = TurnAudit(request.conversation_id, audit_filter=compiled.audit_filter, bus=live,
                          persist_meta=snapshot.settings.audit.persist_meta, turn_id=request.turn_id)
        audit.verbose = self._verbose_for(snapshot)
        return TurnContext(snapshot=snapshot, services=self.services, audit=audit,
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
        try:
            depth = settings.conversation_memory.undo_depth
            if depth:
                await prune_keeping_undo(self.saver.shared, conversation_id, depth)
                return
            await prune_checkpoints(self.saver.shared, conversation_id)
        except Exception as exc:  # noqa: BLE001 - a missed prune only delays the next one
            logger.warning("pruning the checkpoints of %s failed: %s", conversation_id, database_detail(exc))

    async def _failed(self, request: TurnRequest, ctx: TurnContext, exc: BaseException,
                      deferred: Sequence[Write] = ()) -> ConvEngineError:
        """Audit a failed turn. Its checkpoint and rows rolled back with its transaction, so the
        conversation is as its previous turn left it; only this audit (and a new row) is written."""
        error = map_failure(exc)
        error.details.setdefault("conversationId", request.conversation_id)
        known = isinstance(exc, ConvEngineError) or error.code is ErrorCode.DATABASE_UNAVAILABLE
        event = replace(failure_event(request.conversation_id, error, known=known), turn_id=request.turn_id)
        event = memory_service.mask_failed(ctx, request.params, ctx.snapshot.settings.conversation_memory.secret, event)
        memory_service.publish_deferred(ctx, self.bus)
        self.bus.publish(event)
        try:
            await self.store.write_failure(request.conversation_id, [*ctx.audit.events, event], ctx.owner,
                                           _all(memory_service.failure_writes(request), *deferred))
        except Exception as write_error:  # noqa: BLE001 - the original failure is what the caller needs
            logger.warning("could not store the audit of a failed turn of %s: %s", request.conversation_id,
                           database_detail(write_error))
        if not known:
            logger.exception("turn of %s failed", request.conversation_id, exc_info=exc)
        elif error.code is ErrorCode.DATABASE_UNAVAILABLE:
            logger.warning("turn of %s failed: %s (%s)", request.conversation_id, error.message, database_detail(exc))
        return error

    async def seed(self, conversation_id: str, values: dict[str, Any]) -> str:
        config: RunnableConfig = {"configurable": {"thread_id": conversation_id}}
        async with self.locks.hold(conversation_id) as conn, self.saver.bind(conn):
            snap = await self.graph.aget_state(config)
            if (snap.values or {}).get(keys.TURN):
                raise InvalidInputError(f"conversation {conversation_id} has already started; seed it before its "
                                        "first message")
            await self.graph.aupdate_state(config, values, as_node=names.LOAD_OR_CREATE_CONVERSATION)
            if conn is not None:
                await commit_turn_connection(conn)
        return conversation_id

    # --- undo and redo ----------------------------------------------------------------

    async def move(self, conversation_id: str, kind: str, owner: str | None = None) -> UndoResult:
        """Undo or redo the conversation's last turn, under its turn lock (serialised with its turns)."""
        await self.long_term_store()  # the turn may have saved long-term values (set up outside the lock)
        async with self.gate.admit(), self.locks.hold(conversation_id) as conn:
            exists, stored = await self.store.ownership(conversation_id, conn)
            if exists and (owner is None or stored == owner):
                return await memory_service.move(self, conn, conversation_id, kind)
        raise _not_found(conversation_id)

    async def long_term_store(self) -> BaseStore:
        """The shared long-term store, opened and set up on first use."""
        if self.long_term is None:
            async with self._store_lock:
                if self.long_term is None:
                    self.long_term = await self.saver_stack.enter_async_context(open_store(self.url, self.saver.shared))
        return self.long_term

    async def properties(self, user_id: str, owner: str | None = None) -> dict[str, Any]:
        return await longterm.read_all(await self.long_term_store(), user_id, owner)

    async def forget_user(self, user_id: str, conversations: bool, owner: str | None = None) -> dict[str, int]:
        """Erase ``owner``'s user's long-term properties and, with ``conversations``, every conversation
        of theirs (rows, checkpoints, audit), each under its turn lock."""
        return await memory_service.forget_user(self, user_id, conversations, owner)

    async def steps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        await self._readable(conversation_id, owner)
        if not await self.store.exists(conversation_id):
            raise _not_found(conversation_id)
        return await memory_service.read_steps(self, conversation_id)

    async def lifecycle(self, conversation_id: str, owner: str | None = None) -> str:
        await self._readable(conversation_id, owner)
        found = await memory_service.read_lifecycle(self, conversation_id)
        if found is None:
            raise _not_found(conversation_id)
        return found

    # --- reads ------------------------------------------------------------------------

    async def check_access(self, conversation_id: str, owner: str | None,
                           conn: AsyncConnection | None = None) -> bool:
        """Whether the conversation exists; ConversationNotFoundError when it exists but ``owner`` (None:
        anyone) is not its owner, exactly as for a conversation that does not exist. Read from the
        database every time: an erased conversation's id may be created again by another owner
        (:func:`convengine.memory.service.forget_user`), so no process may remember an owner."""
        exists, stored = await self.store.ownership(conversation_id, conn)
        if exists and owner is not None and stored != owner:
            raise _not_found(conversation_id)
        return exists

    async def _readable(self, conversation_id: str, owner: str | None) -> None:
        if owner is not None and not await self.check_access(conversation_id, owner):
            raise _not_found(conversation_id)

    async def audit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]:
        await self._readable(conversation_id, owner)
        events = await self.store.audit(conversation_id)
        if not events and not await self.store.exists(conversation_id):
            raise _not_found(conversation_id)
        return events

    async def history(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        await self._readable(conversation_id, owner)
        rows = await self.store.history(conversation_id)
        if not rows and not await self.store.exists(conversation_id):
            raise _not_found(conversation_id)
        return rows

    async def feedback(self, request: FeedbackRequest, owner: str | None = None) -> Feedback:
        """Store a feedback on the conversation's latest turn, with its MCP_USER_FEEDBACK audit row."""
        cid = request.conversation_id
        if not await self.check_access(cid, owner) or (projection := await self.store.projection(cid)) is None:
            raise _not_found(cid)
        row = fb.build_row(request, projection)
        persist_meta = self.holder.current.settings.audit.persist_meta
        stored: list[tuple[Feedback, AuditEvent]] = []

        def write(conn: sa.Connection) -> None:
            feedback = fb.from_row({**row, "feedback_id": fb.insert(conn, row)})
            event = fb.audit_event(feedback, fb.turn_count(conn, cid), persist_meta=persist_meta)
            if self.audit_filter.keep(event.stage, cid, feedback.intent_code):
                insert_events(conn, [event])
            stored[:] = [(feedback, event)]

        await self.store.run(write)
        feedback, event = stored[0]
        self.bus.publish(event)
        return feedback

    async def feedbacks(self, conversation_id: str, owner: str | None = None) -> list[Feedback]:
        await self._readable(conversation_id, owner)
        if not await self.store.exists(conversation_id):
            raise _not_found(conversation_id)
        async with self.async_engine.connect() as conn:
            rows = await conn.execute(sa.select(fb.FEEDBACK).where(fb.FEEDBACK.c.conversation_id == conversation_id)
                                      .order_by(fb.FEEDBACK.c.feedback_id))
            return [fb.from_row(dict(r._mapping)) for r in rows]

    async def checkpointed_state(self, conversation_id: str, owner: str | None = None) -> EngineState:
        await self._readable(conversation_id, owner)
        snap = await self.graph.aget_state({"configurable": {"thread_id": conversation_id}})
        values = cast(EngineState, snap.values)
        if not values:
            raise _not_found(conversation_id)
        return values


def _result(conversation_id: str, final: EngineState, settings: EngineSettings) -> TurnResult:
    """What the caller gets: the reply a FINAL transformer made, else the stored answer."""
    payload = final.get(keys.REPLY) or final.get(keys.PAYLOAD) or {"type": "TEXT", "value": None}
    return TurnResult(conversation_id, final.get(keys.INTENT) or "", final.get(keys.STATE) or "",
                      Payload.from_state(payload), dict(final.get(keys.CONTEXT) or {}), int(final.get(keys.TURN) or 0),
                      final.get(keys.STATUS) or "RUNNING", memory_service.lifecycle_of(final.get(keys.STATE), settings))


def _all(*writes: Write | None) -> Write:
    """The writes given (memory rows, the version pin when the turn moves it, the deferred LLM call
    log), in order, in one transaction."""
    chosen = [w for w in writes if w is not None]

    def write(conn: sa.Connection) -> None:
        for each in chosen:
            each(conn)

    return write


def _refusal(conversation_id: str, owner: str | None, admission: Admission) -> ConversationNotFoundError | None:
    """Why ``owner`` may not run a turn here (another owner's conversation), or None: decided on the
    owner :func:`~convengine.memory.service.admit` read under the turn lock, in the turn's transaction."""
    if owner is None or not admission.exists or admission.owner == owner:
        return None
    return _not_found(conversation_id)


def _not_found(conversation_id: str) -> ConversationNotFoundError:
    return ConversationNotFoundError(f"no conversation {conversation_id}")


def _versions_hook(runtime: EngineRuntime, options: EngineOptions, extensions: Extensions) -> None:
    """Serve the engine's channel; ``engine.versions`` for list/draft/publish/rollback."""
    sync_live(runtime.sync_engine)
    runtime.versions = VersionServing(runtime.sync_engine, runtime.async_engine, options.channel,
                                      options.settings, extensions, audit_filter=runtime.audit_filter,
                                      semantic=_version_semantic(options.embeddings, runtime.services.semantic))
    runtime.versions.start()
    audit = StepHook(before=runtime.versions.audit_turn, steps=(names.LOAD_OR_CREATE_CONVERSATION,))
    runtime.services.hooks = (*runtime.services.hooks, audit)  # CONFIG_VERSION in each turn's first step
    runtime.versions_api = Versions(runtime.sync_engine, tests=options.conversation_tests, gate=options.test_gate,
                                    settings_overrides=options.settings, extensions=extensions,
                                    on_change=runtime.look_for_changes)


def _check_tables(settings: EngineSettings) -> None:
    if settings.tables:
        raise ConfigError("convengine.tables.* (table renaming) is not supported: the ce_* tables keep "
                          "ConvEngine's default names")


def _prepare(sync_engine: sa.Engine, settings: EngineSettings, pack: str | Path | Mapping[str, Any] | None, extensions: Extensions,
             holder: SnapshotHolder) -> None:
    if settings.auto_migrate:
        upgrade(sync_engine)
    if pack is not None:
        import_pack(sync_engine, pack, extensions=extensions, on_change=record_import,
                    settings_overrides=holder.settings_overrides)
    holder.reload()


def _services(options: EngineOptions, snapshot: ConfigSnapshot, store: ConversationStore) -> Services:
    registries = Registries(
        tasks=TaskRegistry(dict(options.tasks or {})),
        response_transformers=dict(options.response_transformers or {}),
        container_providers=dict(options.container_providers or {}),
        tool_handlers=dict(options.tools or {}),
        tool_adapters=dict(options.tool_adapters or {}),
    )
    llm = None
    if options.llm is not None:
        llm = as_gateway(options.llm, snapshot.settings.llm, store=store)
    return Services(registries=registries,
                    rule_registry=RuleRegistry.with_custom(options.rule_types, options.rule_actions),
                    store=store, llm=llm, hooks=(*memory_scopes.HOOKS, *(options.hooks or ())), clock=options.clock,
                    retriever=_retriever(options.embeddings, snapshot.settings),
                    semantic=_semantic_index(options.embeddings, snapshot))


def _semantic_index(embeddings: Embeddings | None, snapshot: ConfigSnapshot) -> SemanticIndex | None:
    """The SEMANTIC classifiers' example embeddings, computed now (at load), not per turn."""
    semantic = [c.classifier_id for c in snapshot.classifiers if c.enabled and c.rule_type == "SEMANTIC"]
    if embeddings is None:
        if semantic:
            raise ConfigError(f"ce_intent_classifier rows {semantic} are SEMANTIC and need an embeddings model: "
                              "Engine.open(..., embeddings=<a LangChain Embeddings>)")
        return None
    return _build_semantic(embeddings, None, snapshot, ())


def _version_semantic(embeddings: Embeddings | None, live: SemanticIndex | None) -> SemanticBuilder | None:
    """How each served version gets its own SEMANTIC index (None without an embeddings model)."""
    return None if embeddings is None else partial(_build_semantic, embeddings, live)


def _build_semantic(embeddings: Embeddings, live: SemanticIndex | None, snapshot: ConfigSnapshot,
                    known: Sequence[SemanticIndex]) -> SemanticIndex:
    """An index of ``snapshot``'s SEMANTIC examples, reusing the vectors ``known`` and ``live`` hold."""
    index = SemanticIndex(embeddings)
    index.prepare((c.matcher for c in snapshot.classifiers if c.rule_type == "SEMANTIC" and c.matcher is not None),
                  reuse=[*known, *([live] if live is not None else [])])
    return index


def _retriever(embeddings: Embeddings | None, settings: EngineSettings) -> Retriever:
    knowledge = settings.knowledge
    return Retriever(embeddings, SearchSettings(knowledge.lexical_weight, knowledge.vector_weight,
                                                knowledge.candidates))


def _tool_runner(registries: Registries, sync_engine: sa.Engine, settings: EngineSettings) -> ToolRunner:
    return ToolRunner(registries, DbRunner(sync_engine), HttpRunner(), McpServers(dict(settings.mcp.servers)))
