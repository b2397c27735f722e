"""Reads of a conversation, each checked against its owner: access, audit, history, checkpointed state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.audit import AuditEvent
from convengine.catalog.errors import ConversationNotFoundError
from convengine.catalog.state import EngineState
from convengine.engine.resources import EngineResources


def not_found(conversation_id: str) -> ConversationNotFoundError:
    return ConversationNotFoundError(f"no conversation {conversation_id}")


@dataclass(frozen=True)
class ConversationReads:
    resources: EngineResources

    async def check_access(self, conversation_id: str, owner: str | None,
                           conn: AsyncConnection | None = None) -> bool:
        """Whether the conversation exists; ConversationNotFoundError when it exists but ``owner`` (None:
        anyone) is not its owner, exactly as for a conversation that does not exist. Read from the
        database every time: an erased conversation's id may be created again by another owner
        (:func:`convengine.memory.service.forget_user`), so no process may remember an owner."""
        exists, stored = await self.resources.store.ownership(conversation_id, conn)
        if exists and owner is not None and stored != owner:
            raise not_found(conversation_id)
        return exists

    async def readable(self, conversation_id: str, owner: str | None) -> None:
        """ConversationNotFoundError unless ``owner`` (None: anyone) may read the conversation."""
        if owner is not None and not await self.check_access(conversation_id, owner):
            raise not_found(conversation_id)

    async def existing(self, conversation_id: str, owner: str | None) -> None:
        """ConversationNotFoundError unless the conversation exists and ``owner`` may read it."""
        await self.readable(conversation_id, owner)
        if not await self.resources.store.exists(conversation_id):
            raise not_found(conversation_id)

    async def audit(self, conversation_id: str, owner: str | None = None) -> list[AuditEvent]:
        await self.readable(conversation_id, owner)
        events = await self.resources.store.audit(conversation_id)
        if not events and not await self.resources.store.exists(conversation_id):
            raise not_found(conversation_id)
        return events

    async def history(self, conversation_id: str, owner: str | None = None) -> list[dict[str, Any]]:
        await self.readable(conversation_id, owner)
        rows = await self.resources.store.history(conversation_id)
        if not rows and not await self.resources.store.exists(conversation_id):
            raise not_found(conversation_id)
        return rows

    async def checkpointed_state(self, conversation_id: str, owner: str | None = None) -> EngineState:
        await self.readable(conversation_id, owner)
        snap = await self.resources.graph.aget_state({"configurable": {"thread_id": conversation_id}})
        values = cast(EngineState, snap.values)
        if not values:
            raise not_found(conversation_id)
        return values
