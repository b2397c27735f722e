"""The resources an open engine holds on its event loop: databases, saver, graph, locks, services
and audit; opened together by :meth:`EngineResources.open`, released by :meth:`EngineResources.close`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from functools import partial
from typing import Self

import sqlalchemy as sa
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.audit import AuditBus, AuditFilter
from convengine.catalog.state import EngineState
from convengine.checkpointing import TurnLocks, open_saver
from convengine.checkpointing.bound import TurnSaver
from convengine.checkpointing.persistence import ConversationStore
from convengine.config_loader import Extensions, SnapshotHolder
from convengine.db import create_async_sa_engine, create_sync_engine, parse_database_url
from convengine.db.engines import pool_size_for
from convengine.db.url import DatabaseUrl
from convengine.engine import startup
from convengine.engine.admission import AdmissionLimits, TurnGate
from convengine.engine.results import EngineOptions
from convengine.graph.builder import build_graph, compile_graph
from convengine.memory.host import MemoryHost
from convengine.memory.longterm import open_store
from convengine.nodes.context import Services, TurnContext
from convengine.settings import EngineSettings

TurnGraph = CompiledStateGraph[EngineState, TurnContext, EngineState, EngineState]
"""The compiled turn graph (with the engine's checkpointer)."""


@dataclass(kw_only=True)
class EngineResources:
    """What an open engine holds and closes."""

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
    long_term: BaseStore | None = None
    """LangGraph's store (SQLite or PostgreSQL) holding users' long-term properties, opened (and its
    tables set up) the first time a memory feature needs it: importing it costs startup time."""
    _store_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    async def open(cls, raw_url: str, options: EngineOptions, bus: AuditBus, extensions: Extensions) -> Self:
        """Migrate and load the configuration, then open the databases, the saver and the graph."""
        base = EngineSettings.build(**options.settings)
        url = parse_database_url(raw_url)
        startup.check_tables(base)
        sync_engine = await asyncio.to_thread(create_sync_engine, url)
        holder = SnapshotHolder(sync_engine, dict(options.settings), extensions)
        await asyncio.to_thread(startup.prepare, sync_engine, base, options.pack, extensions, holder,
                                replace=options.replace)
        settings = holder.current.settings
        pool = pool_size_for(url, settings.pool)
        async_engine = await asyncio.to_thread(partial(create_async_sa_engine, url, pool=pool))
        stack = contextlib.AsyncExitStack()
        try:
            saver = TurnSaver(await stack.enter_async_context(open_saver(url)))
            store = ConversationStore(async_engine, sync_engine)
            services = startup.services(options, holder.current, store)
        except BaseException:
            await stack.aclose()
            await async_engine.dispose()
            sync_engine.dispose()
            raise
        services.tools = startup.tool_runner(services.registries, sync_engine, settings)
        graph = compile_graph(build_graph(options.steps), checkpointer=saver)
        locks = TurnLocks(url, async_engine, settings.turn_lock_timeout_s)
        if not url.is_postgres:
            await asyncio.to_thread(locks.lock_folder)
        return cls(url=url, holder=holder, sync_engine=sync_engine, async_engine=async_engine, store=store,
                   saver=saver, saver_stack=stack, graph=graph, locks=locks, services=services, bus=bus,
                   audit_filter=AuditFilter(settings.audit),
                   gate=TurnGate(AdmissionLimits.of(settings.admission, pool.capacity)))

    async def close(self) -> None:
        if self.services.tools is not None:
            await self.services.tools.aclose()
        if self.services.retriever is not None:
            self.services.retriever.close()  # its vector index's own connection
        await self.saver_stack.aclose()
        await self.async_engine.dispose()
        self.sync_engine.dispose()

    @functools.cached_property
    def memory_host(self) -> MemoryHost:
        """What conversation memory uses of the engine (undo and redo, its reads, erasure)."""
        return MemoryHost(saver=self.saver, async_engine=self.async_engine, locks=self.locks, bus=self.bus,
                          audit_filter=self.audit_filter, settings=lambda: self.holder.current.settings,
                          read_state=self.graph.aget_state, long_term_store=self.long_term_store)

    async def long_term_store(self) -> BaseStore:
        """The shared long-term store, opened and set up on first use."""
        if self.long_term is None:
            async with self._store_lock:
                if self.long_term is None:
                    self.long_term = await self.saver_stack.enter_async_context(open_store(self.url, self.saver.shared))
        return self.long_term
