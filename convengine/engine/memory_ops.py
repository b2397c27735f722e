"""Conversation memory as the engine offers it: undo and redo under the turn lock, users' long-term
properties, erasure, the step rows and the lifecycle (the work itself is :mod:`convengine.memory.service`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convengine.checkpointing.timeline import UndoResult
from convengine.engine.reads import ConversationReads, not_found
from convengine.engine.resources import EngineResources
from convengine.memory import longterm
from convengine.memory import service as memory_service


@dataclass(frozen=True)
class MemoryOps:
    resources: EngineResources
    reads: ConversationReads

    async def move(self, conversation_id: str, kind: str, owner: str | None = None) -> UndoResult:
        """Undo or redo the conversation's last turn, under its turn lock (serialised with its turns)."""
        resources = self.resources
        await resources.long_term_store()  # the turn may have saved long-term values (set up outside the lock)
        async with resources.gate.admit(), resources.locks.hold(conversation_id) as conn:
            exists, stored = await resources.store.ownership(conversation_id, conn)
            if exists and (owner is None or stored == owner):
                return await memory_service.move(resources.memory_host, conn, conversation_id, kind)
        raise not_found(conversation_id)

    async def properties(self, user_id: str, owner: str | None = None) -> dict[str, Any]:
        return await longterm.read_all(await self.resources.long_term_store(), user_id, owner)

    async def forget_user(self, user_id: str, conversations: bool, owner: str | None = None) -> dict[str, int]:
        """Erase ``owner``'s user's long-term properties and, with ``conversations``, every conversation
        of theirs (rows, checkpoints, audit), each under its turn lock."""
        return await memory_service.forget_user(self.resources.memory_host, user_id, conversations, owner)

    async def steps(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        await self.reads.existing(conversation_id, owner)
        return await memory_service.read_steps(self.resources.memory_host, conversation_id)

    async def lifecycle(self, conversation_id: str, owner: str | None = None) -> str:
        await self.reads.readable(conversation_id, owner)
        found = await memory_service.read_lifecycle(self.resources.memory_host, conversation_id)
        if found is None:
            raise not_found(conversation_id)
        return found
