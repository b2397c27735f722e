"""The last checkpoint of recent conversations, kept in process so a turn need not read it back.

A turn's first database work is one statement under the conversation's lock (its admission, see
:func:`latest_columns`): that statement also reads the id of the conversation's latest checkpoint
and whether writes are pending on it. When this process wrote that very checkpoint (and its turn
committed), the turn's graph starts from the copy kept here instead of reading the checkpoint and
its writes back (on SQLite six thread hops, on PostgreSQL a round trip joining the blobs). A
checkpoint is never changed once written, so an id that matches under the lock means the copy is
what the database holds; any other writer (another worker, an undo, Studio) moves the latest id on
and the next turn reads the database as before.

The copy is kept as the saver stores it (the serializer's bytes and the metadata's JSON text) and
rebuilt on each use, so a turn never shares objects with the turn before it, and stored values are
checked by the same serializer on the way back. Memory is bounded: :data:`RECENT_CONVERSATIONS`
entries, least recently used first out.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple, get_checkpoint_metadata
from langgraph.checkpoint.serde.base import SerializerProtocol

RECENT_CONVERSATIONS = 4096
"""Conversations whose last checkpoint a process keeps (a few KB each: the serialized state)."""

_CHECKPOINTS = sa.table("checkpoints", sa.column("thread_id"), sa.column("checkpoint_ns"), sa.column("checkpoint_id"))
_WRITES = {dialect: sa.table(name, sa.column("thread_id"), sa.column("checkpoint_ns"), sa.column("checkpoint_id"))
           for dialect, name in (("sqlite", "writes"), ("postgresql", "checkpoint_writes"))}
"""The official savers' tables (the same names and keys on both backends but for the writes)."""


def latest_columns(thread_id: str | sa.BindParameter[Any], dialect: str) -> tuple[sa.ScalarSelect[Any], sa.Exists]:
    """Two columns for another query: the id of the thread's latest checkpoint (root namespace; NULL
    without one), and whether writes are stored against it (a run that stopped between steps)."""
    latest = (sa.select(_CHECKPOINTS.c.checkpoint_id)
              .where(_CHECKPOINTS.c.thread_id == thread_id, _CHECKPOINTS.c.checkpoint_ns == "")
              .order_by(_CHECKPOINTS.c.checkpoint_id.desc()).limit(1).scalar_subquery())
    writes = _WRITES[dialect]
    pending = sa.exists().where(writes.c.thread_id == thread_id, writes.c.checkpoint_ns == "",
                                writes.c.checkpoint_id == latest)
    return latest, pending


@dataclass(frozen=True, slots=True)
class Kept:
    """One stored checkpoint, as the saver stores it."""

    checkpoint_id: str
    parent_id: str | None
    typed: tuple[str, bytes]
    metadata: str


def keep(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
         serde: SerializerProtocol) -> Kept:
    """What a saver's ``aput(config, checkpoint, metadata, ...)`` stores, copied."""
    return Kept(checkpoint["id"], config["configurable"].get("checkpoint_id"), serde.dumps_typed(checkpoint),
                json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False))


def rebuild(thread_id: str, kept: Kept, serde: SerializerProtocol) -> CheckpointTuple:
    """The tuple a saver's ``aget_tuple`` returns for the thread's latest checkpoint (no pending writes)."""
    def config(checkpoint_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}

    return CheckpointTuple(config(kept.checkpoint_id), serde.loads_typed(kept.typed), json.loads(kept.metadata),
                           config(kept.parent_id) if kept.parent_id else None, [])


class RecentCheckpoints:
    """Each recent conversation's last committed checkpoint (least recently used out first)."""

    def __init__(self, size: int = RECENT_CONVERSATIONS) -> None:
        self.size = size
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, thread_id: str, latest_id: str) -> Kept | None:
        """The kept checkpoint of ``thread_id`` if it is ``latest_id`` (the database's, read under the lock)."""
        kept = self._kept.get(thread_id)
        if kept is None or kept.checkpoint_id != latest_id:
            self.misses += 1
            return None
        self._kept.move_to_end(thread_id)
        self.hits += 1
        return kept

    def put(self, thread_id: str, kept: Kept) -> None:
        self._kept[thread_id] = kept
        self._kept.move_to_end(thread_id)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        self._kept.pop(thread_id, None)

    def __len__(self) -> int:
        return len(self._kept)
