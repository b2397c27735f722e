"""Undo and redo over a conversation's checkpoints.

Every completed turn writes one checkpoint whose parent is the checkpoint before the turn. Undo
does not delete or rewind anything: it writes a *new* head checkpoint that is a copy of the state
before the undone turn (same channel values and versions, so on PostgreSQL no blob is rewritten),
with metadata saying where the timeline stands:

* ``before``: the checkpoint holding the state before the turn this head reflects (what the next
  undo restores);
* ``forward``: the heads that were undone, newest last (what redo re-applies);
* ``depth``: how many turns back from the newest the head is.

A turn's own checkpoint carries none of this: its ``before`` is its parent and its ``forward`` is
empty, which is why a new message after an undo drops what could have been redone. Redo writes a
copy of ``forward[-1]`` the same way. Pruning keeps every checkpoint these chains reach
(:func:`kept_checkpoints`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6

from convengine.catalog.errors import ErrorCode, UndoError, UnsafeCheckpointError
from convengine.catalog.memory import TURN_METADATA_KEY, UNDO_METADATA_KEY
from convengine.catalog.state import stored_state_problem


@dataclass(frozen=True, slots=True)
class UndoResult:
    """What undo or redo did."""

    conversation_id: str
    action: str
    """UNDO or REDO."""
    turn: int
    """The conversation's turn counter now (the restored state's)."""
    intent: str
    state: str
    undone_turn_id: str | None
    """The turn taken back (undo) or re-applied (redo)."""
    side_effects: list[dict[str, Any]] = field(default_factory=list)
    """Effects of that turn outside the engine (tasks, tools): undo cannot take them back and redo
    does not run them again."""
    can_undo: bool = False
    can_redo: bool = False
    values: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def reversible(self) -> bool:
        """Whether everything the turn did was taken back (no effect outside the engine)."""
        return not self.side_effects

    def to_dict(self) -> dict[str, Any]:
        return {"conversationId": self.conversation_id, "action": self.action, "turn": self.turn,
                "intent": self.intent, "state": self.state, "turnId": self.undone_turn_id,
                "sideEffects": self.side_effects, "reversible": self.reversible, "canUndo": self.can_undo,
                "canRedo": self.can_redo}


@dataclass(frozen=True, slots=True)
class Position:
    """Where a head checkpoint stands in the timeline."""

    before: str | None
    forward: tuple[str, ...]
    depth: int


MAX_CHAIN = 100
"""Longest ``forward`` list and largest ``depth`` a stored timeline may hold (undo_depth's ceiling)."""
MAX_STEP = 2**31
_MAX_ID_CHARS = 64


def position(tup: CheckpointTuple) -> Position:
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return link(checked(tup).metadata or {}, parent)


def checked(tup: CheckpointTuple) -> CheckpointTuple:
    """``tup`` when its metadata and channel values have the shape the engine and LangGraph write
    (stored bytes are untrusted).

    Raises:
        UnsafeCheckpointError: a wrong type, a value out of range, a timeline too long.
    """
    metadata = tup.metadata
    if not isinstance(metadata, dict):
        raise _altered("metadata that is not an object")
    if not isinstance(metadata.get("parents", {}), dict) or not isinstance(metadata.get("source", ""), str):
        raise _altered("LangGraph metadata of the wrong type")
    step = metadata.get("step")
    if step is not None and not _int_in(step, -1, MAX_STEP):
        raise _altered(f"a step of {_shown(step)}")
    turn = metadata.get(TURN_METADATA_KEY)
    if turn is not None and not _an_id(turn):
        raise _altered(f"a turn id of {_shown(turn)}")
    info = metadata.get(UNDO_METADATA_KEY)
    if info is not None and not _a_timeline(info):
        raise _altered(f"undo metadata of {_shown(info)}")
    if not _versions_ok(tup.checkpoint.get("channel_versions"), tup.checkpoint.get("versions_seen")):
        raise _altered("channel versions LangGraph cannot count from")
    values = tup.checkpoint.get("channel_values")
    problem = stored_state_problem(values) if isinstance(values, dict) else "channel values that are not an object"
    if problem is not None:
        raise _altered(problem)
    return tup


def _a_version(version: object) -> bool:
    """A version LangGraph can take the next one from: a counter, or text starting with its digits."""
    if isinstance(version, int):
        return not isinstance(version, bool)
    return isinstance(version, str) and version.split(".", 1)[0].isdigit() and version.isascii()


def _versions_ok(versions: object, seen: object) -> bool:
    if not isinstance(versions, dict) or not all(_a_version(v) for v in versions.values()):
        return False
    return isinstance(seen, dict) and all(isinstance(s, dict) and all(_a_version(v) for v in s.values())
                                          for s in seen.values())


def _a_timeline(info: object) -> bool:
    if not isinstance(info, dict) or info.get("kind") not in ("undo", "redo"):
        return False
    before, forward = info.get("before"), info.get("forward")
    return ((before is None or _an_id(before)) and isinstance(forward, list) and len(forward) <= MAX_CHAIN
            and all(_an_id(f) for f in forward) and _int_in(info.get("depth"), 0, MAX_CHAIN))


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _an_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_ID_CHARS


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _altered(what: str) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(f"a stored checkpoint holds {what}, which the engine never writes; it was not "
                                 "used (the checkpoint was altered outside the engine)")


def config(conversation_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": conversation_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


@dataclass
class Move:
    """An undo or redo decided: the checkpoint to copy and the new head's position."""

    head: CheckpointTuple
    target: CheckpointTuple
    new_position: Position
    moved_turn: str | None
    """The turn taken back (undo) or re-applied (redo)."""


async def plan_undo(saver: BaseCheckpointSaver[str], conversation_id: str, max_depth: int) -> Move:
    head = await _head(saver, conversation_id, ErrorCode.NOTHING_TO_UNDO)
    here = position(head)
    if max_depth <= 0:
        raise UndoError("undo is off (settings conversation_memory.undo_depth is 0)",
                        details={"conversationId": conversation_id})
    if here.depth >= max_depth:
        raise UndoError(f"already {here.depth} turns back, the most undo may take back "
                        "(settings conversation_memory.undo_depth)", details={"conversationId": conversation_id})
    target = await _at(saver, conversation_id, here.before, ErrorCode.NOTHING_TO_UNDO,
                       "there is no earlier turn to go back to")
    new = Position(position(target).before, (*here.forward, _id(head)), here.depth + 1)
    return Move(head, target, new, _turn_of(head))


async def plan_redo(saver: BaseCheckpointSaver[str], conversation_id: str) -> Move:
    head = await _head(saver, conversation_id, ErrorCode.NOTHING_TO_REDO)
    here = position(head)
    if not here.forward:
        raise UndoError("there is no undone turn to redo (a new message after an undo drops the redo)",
                        code=ErrorCode.NOTHING_TO_REDO, details={"conversationId": conversation_id})
    target = await _at(saver, conversation_id, here.forward[-1], ErrorCode.NOTHING_TO_REDO,
                       "the undone turn is no longer stored")
    new = Position(_id(head), here.forward[:-1], max(here.depth - 1, 0))
    return Move(head, target, new, _turn_of(target))


async def apply(saver: BaseCheckpointSaver[str], move: Move, kind: str) -> dict[str, Any]:
    """Write the new head: a copy of the target's checkpoint with the new position. Returns its values."""
    checkpoint = copy_checkpoint(move.target.checkpoint)
    checkpoint["id"] = str(uuid6(clock_seq=int((move.head.metadata or {}).get("step") or 0) + 1))
    checkpoint["ts"] = datetime.now(UTC).isoformat()
    metadata: dict[str, Any] = {
        "source": "update", "step": int((move.head.metadata or {}).get("step") or 0) + 1, "parents": {},
        TURN_METADATA_KEY: (move.target.metadata or {}).get(TURN_METADATA_KEY),
        UNDO_METADATA_KEY: {"kind": kind, "before": move.new_position.before,
                            "forward": list(move.new_position.forward), "depth": move.new_position.depth},
    }
    # langgraph's CheckpointMetadata TypedDict does not declare the keys convengine adds to it
    await saver.aput(move.head.config, checkpoint, metadata, {})  # type: ignore[arg-type]
    return dict(move.target.checkpoint.get("channel_values") or {})


def link(metadata: object, parent_id: str | None) -> Position:
    """Where a stored checkpoint stands in the timeline, read from its metadata (a dict, or the JSON text
    SQLite stores) and its parent's id alone, without loading its state. Stored bytes are untrusted.

    Raises:
        UnsafeCheckpointError: metadata that is not a JSON object, or undo metadata of the wrong shape.
    """
    if isinstance(metadata, (bytes, str)):
        try:
            metadata = json.loads(metadata)
        except (ValueError, RecursionError):
            raise _altered("metadata that is not JSON") from None
    if not isinstance(metadata, dict):
        raise _altered("metadata that is not an object")
    info = metadata.get(UNDO_METADATA_KEY)
    if info is None:
        return Position(parent_id, (), 0)
    if not _a_timeline(info):
        raise _altered(f"undo metadata of {_shown(info)}")
    return Position(info["before"], tuple(info["forward"]), int(info["depth"]))


def kept_checkpoints(links: Mapping[str, Position], depth: int) -> set[str]:
    """The checkpoints undo and redo can still reach from the head (the latest of ``links``, a
    conversation's checkpoints by id, as :func:`link` reads them; at most ``depth`` back along every
    chain), which pruning must keep."""
    if not links:
        return set()
    head = max(links)  # the savers' latest: the greatest id
    starts = [head, *(f for f in links[head].forward if f in links)]
    kept = set(starts)
    for start in starts:
        current = links.get(start)
        for _ in range(depth):
            if current is None or current.before is None:
                break
            kept.add(current.before)
            current = links.get(current.before)
    return kept


def _turn_of(tup: CheckpointTuple) -> str | None:
    turn = (tup.metadata or {}).get(TURN_METADATA_KEY)
    return turn if isinstance(turn, str) else None


def _id(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])


async def _head(saver: BaseCheckpointSaver[str], conversation_id: str, code: ErrorCode) -> CheckpointTuple:
    head = await saver.aget_tuple(config(conversation_id))
    if head is None:
        raise UndoError("the conversation has no completed turn", code=code,
                        details={"conversationId": conversation_id})
    return head


async def _at(saver: BaseCheckpointSaver[str], conversation_id: str, checkpoint_id: str | None, code: ErrorCode,
              why: str) -> CheckpointTuple:
    found = await saver.aget_tuple(config(conversation_id, checkpoint_id)) if checkpoint_id else None
    if found is None:
        raise UndoError(why, code=code, details={"conversationId": conversation_id})
    return found
