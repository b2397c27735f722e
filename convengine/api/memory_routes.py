"""Conversation memory over HTTP: undo, redo and the conversation's steps.

``POST /api/v1/conversation/{conversationId}/undo`` and ``/redo`` answer 200 with what was done,
409 with ``NOTHING_TO_UNDO`` / ``NOTHING_TO_REDO`` / ``UNDO_FORBIDDEN`` when refused, 404 for an
unknown conversation or one of another caller, 409 ``CONVERSATION_BUSY`` when a turn holds it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import error_response
from convengine.api.routes import REFUSALS, CallerDep, ConversationId, EngineDep
from convengine.api.schemas import ErrorBody
from convengine.audit import stages
from convengine.errors import ConversationBusyError, UndoError

router = APIRouter(route_class=DepthCheckedRoute)
CONFLICT: dict[int | str, dict[str, Any]] = {**REFUSALS, 409: {"model": ErrorBody}}


async def _move(kind: str, conversation_id: str, engine: Any, owner: str | None) -> Any:
    try:
        if kind == stages.UNDO:
            result = await engine.aundo(conversation_id, owner=owner)
        else:
            result = await engine.aredo(conversation_id, owner=owner)
    except (UndoError, ConversationBusyError) as refused:
        return error_response(409, refused.code, refused.message)
    return JSONResponse(result.to_dict())


@router.post("/api/v1/conversation/{conversation_id}/undo", tags=["memory"], responses=CONFLICT)
async def undo(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> Any:
    """Take back the conversation's last turn (several calls go back several turns)."""
    return await _move(stages.UNDO, conversation_id, engine, caller.owner)


@router.post("/api/v1/conversation/{conversation_id}/redo", tags=["memory"], responses=CONFLICT)
async def redo(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> Any:
    """Re-apply the turn the last undo took back."""
    return await _move(stages.REDO, conversation_id, engine, caller.owner)


@router.get("/api/v1/conversation/{conversation_id}/steps", tags=["memory"], responses=REFUSALS)
async def steps(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> list[dict[str, Any]]:
    """One entry per completed turn: input, actions, data, output, side effects, undone."""
    return await engine.asteps(conversation_id, owner=caller.owner)
