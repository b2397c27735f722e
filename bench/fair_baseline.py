"""The fair baseline: the least an engine turn must do, done with LangGraph and the engine's own plumbing.

The bare graph of :mod:`bench.common` runs every compiled node on a state of one or two tiny
fields, with no lock, no transaction of its own and no row of history. An engine turn executes
only the nodes its routing reaches, carries a state of some twenty keys, holds the conversation's
lock and writes its checkpoint and rows in one transaction. The fair baseline measures that work:

- the engine's executed nodes per turn are counted from its audit (``STEP_ENTER`` events) on a
  probe run of the flow, on its own database, and the baseline is a linear graph of that many
  trivial nodes;
- its state has the keys and values of a real engine state from the probe (the one of median
  size, as JSON), and each node writes one of its keys in turn, so the checkpoint is engine-sized;
- each turn holds the conversation with the engine's :class:`~convengine.checkpointing.TurnLocks`,
  runs the graph under :meth:`~convengine.checkpointing.bound.TurnSaver.bind` in
  ``durability="exit"``, invoked as the engine invokes an untraced turn (``version="v2"`` and no
  output keys: no state is read and streamed after each step; the engine's last step records the
  final state itself), writes one ``ce_conversation_history`` row
  (and the conversation's row on its first turn) on the same connection, and commits once, as the engine does.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

import sqlalchemy as sa
from langgraph.graph import StateGraph

from bench.common import Flow, chain
from convengine.catalog import stages
from convengine.checkpointing import TurnLocks, open_saver
from convengine.checkpointing.bound import TurnSaver, commit_turn_connection
from convengine.checkpointing.persistence import insert_conversation
from convengine.db import create_async_sa_engine, parse_database_url, upgrade
from convengine.db.models import CeConversationHistory
from convengine.engine import Engine

HISTORY = CeConversationHistory.__table__
LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Profile:
    """What an engine turn of a flow does, measured on a probe run."""

    executed_nodes_per_turn: float
    """Mean ``STEP_ENTER`` events per turn (the nodes the engine's routing reached)."""
    state: dict[str, Any]
    """A real engine state after a turn (the probe turn of median size), as plain JSON values."""
    probe_turns: int

    @property
    def nodes(self) -> int:
        return max(1, round(self.executed_nodes_per_turn))

    @property
    def state_bytes(self) -> int:
        return len(json.dumps(self.state).encode())

    def describe(self) -> dict[str, Any]:
        return {"executed_nodes_per_turn": self.executed_nodes_per_turn, "fair_nodes": self.nodes,
                "state_keys": len(self.state), "state_bytes": self.state_bytes, "probe_turns": self.probe_turns}


def conversation_ids(flow: Flow) -> Callable[[int], tuple[str, bool]]:
    """The conversation of turn ``i`` (a new one every ``flow.reset_every`` turns) and whether it is new."""
    current = [str(uuid.uuid4()), True]

    def cid(i: int) -> tuple[str, bool]:
        if flow.reset_every and i and i % flow.reset_every == 0:
            current[:] = [str(uuid.uuid4()), True]
        fresh = bool(current[1])
        current[1] = False
        return str(current[0]), fresh

    return cid


def _plain(state: Any) -> dict[str, Any]:
    return dict(json.loads(json.dumps(dict(state), default=str)))


async def profile(url: str, flow: Flow, turns: int | None = None) -> Profile:
    """Run ``turns`` turns of ``flow`` (two rounds of its messages by default) on a fresh engine and count."""
    turns = turns or 2 * len(flow.messages)
    engine = await Engine.aopen(url, **flow.options())
    try:
        next_cid = conversation_ids(flow)
        seen: list[str] = []
        states: list[dict[str, Any]] = []
        for i in range(turns):
            cid, fresh = next_cid(i)
            if fresh:
                seen.append(cid)
            await engine.aprocess(flow.messages[i % len(flow.messages)], cid)
            states.append(_plain(await engine.astate(cid)))
        enters = 0
        for cid in seen:
            enters += sum(1 for event in await engine.aaudit(cid) if event.stage == stages.STEP_ENTER)
    finally:
        await engine.aclose()
    if not enters:
        raise SystemExit(f"{flow.name}: the probe run audited no {stages.STEP_ENTER} event; set audit.level ALL")
    sizes = [len(json.dumps(s)) for s in states]
    median = statistics.median_low(sizes)
    return Profile(enters / turns, states[sizes.index(median)], turns)


def fair_graph(prof: Profile) -> StateGraph[Any, Any, Any, Any]:
    """``prof.nodes`` trivial nodes in a line over the engine's state keys; node ``i`` writes key ``i`` (cycling)."""
    keys = sorted(prof.state)
    schema = TypedDict("FairState", {key: Any for key in keys}, total=False)  # type: ignore[misc]
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(schema)
    names = [f"n{i}" for i in range(prof.nodes)]

    def make(key: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        value = prof.state[key]

        async def node(state: dict[str, Any]) -> dict[str, Any]:
            return {key: value}
        return node

    for name, key in zip(names, itertools.cycle(keys)):
        graph.add_node(name, make(key))
    return chain(graph, names)


def _turn_input(prof: Profile, cid: str, text: str, fresh: bool) -> dict[str, Any]:
    """The state a turn starts from: the whole engine-sized state on a conversation's first turn, then
    the turn's own input (as the engine's: the conversation id and the message) over the checkpoint."""
    update: dict[str, Any] = {key: value for key, value in (("conversation_id", cid),
                                                            ("turn_input", {"text": text}))
                              if key in prof.state}
    return {**prof.state, **update} if fresh else update


def _history_row(cid: str, text: str, fresh: bool) -> Callable[[sa.Connection], None]:
    def write(conn: sa.Connection) -> None:
        if fresh:
            insert_conversation(conn, cid, text)
        conn.execute(sa.insert(HISTORY).values(conversation_id=cid, user_input=text,
                                               assistant_output={"type": "TEXT", "value": f"reply to {text}"}))
    return write


@asynccontextmanager
async def fair_turns(url: str, flow: Flow, prof: Profile) -> AsyncIterator[Callable[[int], Awaitable[Any]]]:
    """Turns of the fair baseline on ``url`` (a fresh database), conversations reset like ``flow``'s."""
    parsed = parse_database_url(url)
    await asyncio.to_thread(upgrade, parsed)
    async_engine = create_async_sa_engine(parsed)
    try:
        async with open_saver(parsed) as shared:
            saver = TurnSaver(shared)
            graph = fair_graph(prof).compile(checkpointer=saver)
            locks = TurnLocks(parsed, async_engine, LOCK_TIMEOUT_S)
            if not parsed.is_postgres:
                await asyncio.to_thread(locks.lock_folder)
            next_cid = conversation_ids(flow)

            async def turn(i: int) -> None:
                cid, fresh = next_cid(i)
                text = flow.messages[i % len(flow.messages)]
                config: Any = {"configurable": {"thread_id": cid}}
                async with locks.hold(cid) as conn, saver.bind(conn):
                    assert conn is not None, "a turn lock yields the turn's connection"
                    await graph.ainvoke(_turn_input(prof, cid, text, fresh), config, durability="exit",
                                        version="v2", output_keys=[])
                    await conn.run_sync(_history_row(cid, text, fresh))
                    await commit_turn_connection(conn)

            yield turn
    finally:
        await async_engine.dispose()
