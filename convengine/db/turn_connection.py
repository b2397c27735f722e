"""The running turn's connection, for whatever touches the engine's database while a turn holds one.

A turn holds its conversation's lock and one pooled connection from its first statement to its
commit. Anything that reads the engine's database during the turn (the adoption of a row without a
checkpoint, the spend cap) reads on that connection rather than asking the pool for a second one:
a turn waiting for a second connection of the pool it holds one of deadlocks as soon as every
connection is held by such a turn, and nothing moves until the pool's timeout. Writes that must
outlive a failed turn (the LLM call log) are deferred and written in the turn's commit, or with its
failure audit when it fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Write = Callable[[sa.Connection], None]
logger = logging.getLogger(__name__)


@dataclass
class TurnConnection:
    """The connection a turn holds, and the writes deferred to its commit."""

    conn: AsyncConnection
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Serialises this module's uses of the connection (a graph may run steps side by side)."""
    deferred: list[Write] = field(default_factory=list)

    def serves(self, engine: AsyncEngine) -> bool:
        """Whether ``engine`` is the pool this connection came from."""
        return self.conn.sync_engine is engine.sync_engine


_CURRENT: ContextVar[TurnConnection | None] = ContextVar("convengine_turn_connection", default=None)


@contextmanager
def bound(conn: AsyncConnection) -> Iterator[TurnConnection]:
    """Make ``conn`` the current task's (and its subtasks') turn connection while the block runs."""
    turn = TurnConnection(conn)
    token = _CURRENT.set(turn)
    try:
        yield turn
    finally:
        _CURRENT.reset(token)


def current(engine: AsyncEngine) -> TurnConnection | None:
    """The running turn's connection when it comes from ``engine``'s pool, else None."""
    turn = _CURRENT.get()
    return turn if turn is not None and turn.serves(engine) else None


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection to read on: the running turn's own, else one from ``engine``'s pool for this use."""
    turn = current(engine)
    if turn is not None:
        async with turn.lock:
            yield turn.conn
        return
    async with engine.begin() as conn:
        yield conn


def defer(engine: AsyncEngine, write: Write) -> bool:
    """Queue ``write`` for the running turn's commit (True), or False when no turn of ``engine`` runs.

    A deferred write is a log (LLM calls, usage) and never breaks the turn: one that fails is left
    out (on PostgreSQL inside a savepoint, so the turn's transaction goes on) and logged."""
    turn = current(engine)
    if turn is None:
        return False
    turn.deferred.append(partial(_best_effort, write))
    return True


def _best_effort(write: Write, conn: sa.Connection) -> None:
    try:
        if conn.dialect.name == "postgresql":  # a failed statement aborts the transaction: isolate it
            with conn.begin_nested():
                write(conn)
        else:  # SQLite rolls back just the failed statement
            write(conn)
    except sa.exc.SQLAlchemyError as exc:
        logger.warning("a log row deferred to the turn's commit was left out: %s", str(exc).splitlines()[0])
