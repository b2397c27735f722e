"""The one commit path of a turn: the rows its final state settles, written with its audit batch.

``persist_conversation`` settles the conversation in the turn's state (context, params, status,
payload) and marks it ``persisted``; nothing inside the graph writes the turn. Whoever ran the
graph commits its final state here: the engine's runtime (in the transaction of the turn's
checkpoint) and LangGraph Studio's last node (no engine around it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from convengine.audit.events import AuditEvent
from convengine.catalog import state as keys
from convengine.checkpointing.persistence import ConversationStore, TurnExtra
from convengine.nodes.finish import json_safe, stored_assistant


@dataclass(frozen=True, slots=True)
class TurnRows:
    """The ``ce_conversation`` projection and ``ce_conversation_history`` row of a turn (None: not persisted)."""

    projection: dict[str, Any] | None = None
    history: dict[str, Any] | None = None


def turn_rows(conversation_id: str, final: Mapping[str, Any]) -> TurnRows:
    """The rows of a turn whose graph run ended in ``final`` (ConvEngine's column names)."""
    if not final.get(keys.PERSISTED):
        return TurnRows()
    user_text = str(final.get(keys.USER_TEXT) or "")
    assistant = json_safe(stored_assistant(final.get(keys.PAYLOAD) or {}))
    projection = {
        "conversation_id": conversation_id, "status": final.get(keys.STATUS) or "RUNNING",
        "intent_code": final.get(keys.INTENT), "state_code": final.get(keys.STATE),
        "context_json": final.get(keys.CONTEXT) or {}, "last_user_text": user_text,
        "last_assistant_json": assistant, "input_params_json": final.get(keys.INPUT_PARAMS) or {},
    }
    history = {"conversation_id": conversation_id, "user_input": user_text, "assistant_output": assistant}
    return TurnRows(projection, history)


async def commit_turn(store: ConversationStore, conn: AsyncConnection | None, *, conversation_id: str,
                      final: Mapping[str, Any], events: Sequence[AuditEvent], owner: str | None = None,
                      extra: TurnExtra | None = None) -> None:
    """Projection, history row, audit batch and ``extra`` (conversation memory) in one transaction: on
    ``conn`` with the turn's checkpoint (then committed, which also ends the PostgreSQL turn lock), or
    on a connection of its own when ``conn`` is None."""
    rows = turn_rows(conversation_id, final)
    await store.commit_turn(conn, conversation_id=conversation_id, projection=rows.projection,
                            history=rows.history, events=events, owner=owner, extra=extra)
