"""HTTP endpoints of conversation flows: start a conversation with the welcome event (the bot
speaks first) and hand a conversation back from a human to the bot (admin)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from convengine.api.admission import ANSWERED_BY_STATUS
from convengine.api.body import DepthCheckedRoute
from convengine.api.routes import REFUSALS, AdminDep, CallerDep, ConversationId, EngineDep, error_reply
from convengine.api.schemas import ErrorBody, MessageResponse, PayloadBody
from convengine.catalog.errors import ConvEngineError, ConversationNotFoundError
from convengine.engine import TurnResult

router = APIRouter(route_class=DepthCheckedRoute)


class StartRequest(BaseModel):
    conversationId: str | None = Field(None, description="A new conversation's UUID (generated when absent).")
    inputParams: dict[str, Any] | None = None


class FlowResponse(MessageResponse):
    """A reply with the conversation's status (RUNNING, or HANDOFF while a human has it)."""

    status: str = "RUNNING"


def _reply(result: TurnResult) -> FlowResponse:
    return FlowResponse(success=True, conversationId=result.conversation_id, intent=result.intent, state=result.state,
                        payload=PayloadBody.of(result.payload),
                        context=json.dumps(result.context, ensure_ascii=False, default=str), status=result.status)


@router.post("/api/v1/conversation/start", response_model=FlowResponse, tags=["conversation"],
             responses={**REFUSALS, 413: {"model": ErrorBody}})
async def start_conversation(body: StartRequest, engine: EngineDep, caller: CallerDep) -> MessageResponse:
    """Start a conversation with the welcome event: the welcome flow's first messages."""
    try:
        result = await engine.astart(body.conversationId, body.inputParams, owner=caller.owner)
    except ConvEngineError as exc:
        if isinstance(exc, ANSWERED_BY_STATUS):
            raise
        return error_reply(exc.details.get("conversationId") or body.conversationId, exc)
    return _reply(result)


@router.post("/api/v1/conversation/{conversation_id}/handoff/resume", response_model=FlowResponse,
             tags=["conversation"], responses={**REFUSALS, 403: {"model": ErrorBody}})
async def resume_from_handoff(conversation_id: ConversationId, engine: EngineDep, _: AdminDep) -> MessageResponse:
    """Hand a conversation back to the bot (admin): its flow continues at the handoff node's next edge."""
    if not await engine.acheck_access(conversation_id):
        raise ConversationNotFoundError(f"no conversation {conversation_id}")
    try:
        result = await engine.aresume_from_handoff(conversation_id)
    except ConvEngineError as exc:
        if isinstance(exc, ANSWERED_BY_STATUS):
            raise
        return error_reply(conversation_id, exc)
    return _reply(result)
