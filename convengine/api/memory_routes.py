"""Conversation memory over HTTP: undo, redo and the conversation's steps; a user's long-term
properties and their erasure.

``POST /api/v1/conversation/{conversationId}/undo`` and ``/redo`` answer 200 with what was done,
409 with ``NOTHING_TO_UNDO`` / ``NOTHING_TO_REDO`` / ``UNDO_FORBIDDEN`` when refused, 404 for an
unknown conversation or one of another caller, 409 ``CONVERSATION_BUSY`` when a turn holds it.

``GET /api/v1/users/properties?userId=`` and ``POST /api/v1/users/forget`` act on the caller's user
of that id (the user the caller's conversations name): another key's (or tenant's) user of the same
id is another user. An admin key, like host code, acts on the host application's users.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import error_response
from convengine.api.routes import REFUSALS, CallerDep, ConversationId, EngineDep
from convengine.api.schemas import ErrorBody
from convengine.catalog import stages
from convengine.catalog.errors import ConversationBusyError, UndoError
from convengine.engine import Engine
from convengine.security.users import MAX_USER_ID_CHARS

router = APIRouter(route_class=DepthCheckedRoute)
CONFLICT: dict[int | str, dict[str, Any]] = {**REFUSALS, 409: {"model": ErrorBody}}


async def _move(kind: str, conversation_id: str, engine: Engine, owner: str | None) -> Any:
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


UserId = Annotated[str, Query(min_length=1, max_length=MAX_USER_ID_CHARS,
                              description="The end user, as the message endpoint's userId names it.")]


class UserProperties(BaseModel):
    userId: str
    properties: dict[str, Any]


class ForgetUserBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    userId: str = Field(min_length=1, max_length=MAX_USER_ID_CHARS)
    conversations: bool = False
    """Also erase every conversation of the user (rows, audit, history, steps and checkpoints)."""


class ForgetUserResponse(BaseModel):
    properties: int
    """Long-term properties erased."""
    conversations: int
    """Conversations erased (0 without ``conversations``)."""


@router.get("/api/v1/users/properties", response_model=UserProperties, tags=["memory"], responses=REFUSALS)
async def user_properties(userId: UserId, engine: EngineDep, caller: CallerDep) -> dict[str, Any]:
    """The caller's user's long-term properties (``conversation_memory.long_term``), by name."""
    return {"userId": userId, "properties": await engine.aproperties(userId, owner=caller.owner)}


@router.post("/api/v1/users/forget", response_model=ForgetUserResponse, tags=["memory"], responses=REFUSALS)
async def forget_user(body: ForgetUserBody, engine: EngineDep, caller: CallerDep) -> dict[str, int]:
    """Erase the caller's user's long-term memory (and, with ``conversations``, their conversations)."""
    return await engine.aforget_user(body.userId, conversations=body.conversations, owner=caller.owner)
