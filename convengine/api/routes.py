"""ConvEngine's REST endpoints: message, audit, trace, SSE stream, cache refresh/analyze, health."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sse_starlette.sse import EventSourceResponse

from convengine.api.schemas import AuditRow, ErrorBody, MessageRequest, MessageResponse
from convengine.audit.events import AuditEvent
from convengine.engine import Engine
from convengine.engine_io import normalise_conversation_id
from convengine.errors import ConfigValidationError, ConvEngineError

router = APIRouter()
# Declared as a UUID in the OpenAPI schema but checked by the engine, so a bad id gets
# ConvEngine's INVALID_CONVERSATION_ID error rather than FastAPI's generic one.
ConversationId = Annotated[str, Path(description="The conversation's UUID.", json_schema_extra={"format": "uuid"})]


def engine_of(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


EngineDep = Annotated[Engine, Depends(engine_of)]


def error_reply(conversation_id: str | None, error: ConvEngineError) -> MessageResponse:
    """ConvEngine's error contract: HTTP 200, intent/state ERROR, payload ERROR with a JSON string value."""
    body = error.to_payload()
    return MessageResponse(success=False, conversationId=conversation_id, intent="ERROR", state="ERROR",
                           payload={"type": "ERROR", "value": json.dumps(body)}, context="{}",
                           errorCode=body["errorCode"], recoverable=body["recoverable"], message=body["message"])


@router.post("/api/v1/conversation/message", response_model=MessageResponse, tags=["conversation"],
             responses={413: {"model": ErrorBody}, 422: {"model": ErrorBody}})
async def post_message(body: MessageRequest, engine: EngineDep) -> MessageResponse:
    """Process one user message (one turn)."""
    try:
        result = await engine.aprocess(body.message, body.conversationId, body.inputParams, body.reset)
    except ConvEngineError as exc:
        if _caller_mistake(exc):
            raise
        return error_reply(exc.details.get("conversationId") or body.conversationId, exc)
    return MessageResponse(success=True, conversationId=result.conversation_id, intent=result.intent,
                           state=result.state, payload={"type": result.payload.type, "value": result.payload.value},
                           context=json.dumps(result.context, ensure_ascii=False, default=str))


def _caller_mistake(exc: ConvEngineError) -> bool:
    from convengine.errors import InvalidInputError

    return isinstance(exc, InvalidInputError)


@router.get("/api/v1/conversation/audit/{conversation_id}", response_model=list[AuditRow], tags=["audit"],
            responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}})
async def get_audit(conversation_id: ConversationId, engine: EngineDep) -> list[dict[str, Any]]:
    """Every audit row of a conversation, oldest first."""
    return [e.to_dict() for e in await engine.aaudit(conversation_id)]


@router.get("/api/v1/conversation/audit/{conversation_id}/trace", tags=["audit"],
            responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}})
async def get_trace(conversation_id: ConversationId, engine: EngineDep) -> dict[str, Any]:
    """The audit trail as a tree of steps and their stages."""
    return await engine.atrace(conversation_id)


def sse_event(event: AuditEvent) -> dict[str, str]:
    data = {"eventType": "AUDIT", "auditId": event.audit_id, "stage": event.stage,
            "createdAt": event.created_at.isoformat(), "payload": event.stored_payload(), "verbose": None}
    return {"event": event.stage, "data": json.dumps(data, ensure_ascii=False, default=str)}


@router.get("/api/v1/conversation/stream/{conversation_id}", tags=["conversation"],
            responses={404: {"model": ErrorBody}, 422: {"model": ErrorBody}})
async def stream(conversation_id: ConversationId, request: Request, engine: EngineDep) -> EventSourceResponse:
    """Server-sent events: ``CONNECTED`` first, then every audit event of the conversation as it happens."""
    if not engine.settings.transport.sse.enabled:
        return JSONResponse(status_code=404, content=ErrorBody(errorCode="NOT_FOUND",
                                                               message="SSE streaming is disabled").model_dump())
    cid = normalise_conversation_id(conversation_id)
    subscription = engine.subscribe(cid)
    timeout = engine.settings.transport.sse.emitter_timeout_ms / 1000

    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            yield {"event": "CONNECTED", "data": json.dumps({"conversationId": cid, "transport": "SSE"})}
            deadline = asyncio.get_running_loop().time() + timeout
            while not await request.is_disconnected():
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    event = await asyncio.wait_for(subscription.queue.get(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    continue
                yield sse_event(event)
        finally:
            engine.bus.unsubscribe(subscription)

    return EventSourceResponse(events(), ping=15)


@router.post("/api/v1/cache/refresh", response_class=PlainTextResponse, tags=["cache"],
             responses={422: {"model": ErrorBody}})
async def refresh(engine: EngineDep) -> Any:
    """Reload and re-validate the control tables; on failure the current configuration stays."""
    try:
        snapshot = await engine.areload()
    except ConfigValidationError as exc:
        return JSONResponse(status_code=422, content=ErrorBody(
            errorCode=exc.code.value, message=exc.message, details=[{"violation": v} for v in exc.details["violations"]]
        ).model_dump())
    return f"Cache refreshed: configuration version {snapshot.version}"


@router.get("/api/v1/cache/analyze", tags=["cache"])
async def analyze(engine: EngineDep) -> dict[str, Any]:
    """Statistics of the loaded configuration snapshot."""
    return {"snapshot": engine.snapshot.statistics(), "database": engine.database_label,
            "settings": {"dialogueAct": engine.settings.flow.dialogue_act.resolute,
                         "auditLevel": engine.settings.audit.level, "sse": engine.settings.transport.sse.enabled}}


@router.get("/health", tags=["health"])
async def health(engine: EngineDep) -> dict[str, Any]:
    """Liveness and the configuration version in use."""
    return {"status": "ok", "configVersion": engine.snapshot.version, "database": engine.database_label}
