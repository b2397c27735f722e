"""Feedback on a conversation's answers as the engine takes it: stored with its audit row, listed."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from convengine.audit import AuditEvent
from convengine.checkpointing.persistence import insert_events
from convengine.engine import feedback as fb
from convengine.engine.feedback import Feedback, FeedbackRequest
from convengine.engine.reads import ConversationReads, not_found
from convengine.engine.resources import EngineResources


@dataclass(frozen=True)
class FeedbackDesk:
    resources: EngineResources
    reads: ConversationReads

    async def feedback(self, request: FeedbackRequest, owner: str | None = None) -> Feedback:
        """Store a feedback on the conversation's latest turn, with its MCP_USER_FEEDBACK audit row."""
        resources, cid = self.resources, request.conversation_id
        if (not await self.reads.check_access(cid, owner)
                or (projection := await resources.store.projection(cid)) is None):
            raise not_found(cid)
        row = fb.build_row(request, projection)
        persist_meta = resources.holder.current.settings.audit.persist_meta
        stored: list[tuple[Feedback, AuditEvent]] = []

        def write(conn: sa.Connection) -> None:
            feedback = fb.from_row({**row, "feedback_id": fb.insert(conn, row)})
            event = fb.audit_event(feedback, fb.turn_count(conn, cid), persist_meta=persist_meta)
            if resources.audit_filter.keep(event.stage, cid, feedback.intent_code):
                insert_events(conn, [event])
            stored[:] = [(feedback, event)]

        await resources.store.run(write)
        feedback, event = stored[0]
        resources.bus.publish(event)
        return feedback

    async def feedbacks(self, conversation_id: str, owner: str | None = None) -> list[Feedback]:
        await self.reads.existing(conversation_id, owner)
        async with self.resources.async_engine.begin() as conn:
            rows = await conn.execute(sa.select(fb.FEEDBACK).where(fb.FEEDBACK.c.conversation_id == conversation_id)
                                      .order_by(fb.FEEDBACK.c.feedback_id))
            return [fb.from_row(dict(r._mapping)) for r in rows]
