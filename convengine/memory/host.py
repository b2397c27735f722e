"""What conversation memory needs from the engine that hosts it, handed in by the engine.

Memory sits below the engine (it must not import it): undo and redo, the reads and the erasure take
a :class:`MemoryHost` instead of the engine itself, so what they use of it is named and typed here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from langchain_core.runnables import RunnableConfig
from langgraph.store.base import BaseStore
from langgraph.types import StateSnapshot
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.audit import AuditBus, AuditFilter
from convengine.checkpointing import TurnLocks
from convengine.checkpointing.bound import TurnSaver
from convengine.settings import EngineSettings


@dataclass(frozen=True, slots=True)
class MemoryHost:
    """The engine's resources memory works with."""

    saver: TurnSaver
    """The checkpointer, bound to the turn's connection under the conversation's lock."""
    async_engine: AsyncEngine
    """Connections for the reads, and for the writes of a backend whose lock holds none."""
    locks: TurnLocks
    """The conversations' turn locks (erasure takes each one)."""
    bus: AuditBus
    """Live audit events (undo and redo publish theirs)."""
    audit_filter: AuditFilter
    """Which audit events are kept."""
    settings: Callable[[], EngineSettings]
    """The settings of the configuration in force now (read at each call: a reload replaces them)."""
    read_state: Callable[[RunnableConfig], Awaitable[StateSnapshot]]
    """The turn graph's checkpointed state of a conversation."""
    long_term_store: Callable[[], Awaitable[BaseStore]]
    """LangGraph's store of users' long-term properties, opened on first use."""
