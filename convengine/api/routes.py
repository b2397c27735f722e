"""ConvEngine's REST endpoints: message, audit, trace, SSE stream, cache refresh/analyze, health."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import TypeAdapter
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from convengine._internal.turn_io import normalise_conversation_id
from convengine.api.admission import ANSWERED_BY_STATUS
from convengine.api.auth import Principal
from convengine.api.body import DepthCheckedRoute, RequestRoute, json_body, read_body
from convengine.api.config import ApiConfig
from convengine.api.refusals import ApiRefusal, error_response
from convengine.api.schemas import (
    AuditRow,
    ErrorBody,
    FeedbackRequestBody,
    FeedbackResponse,
    FeedbackRow,
    HealthBody,
    MessageRequest,
    MessageResponse,
    PayloadBody,
    ReadyBody,
)
from convengine.api.streams import Lease, StreamRegistry, Watch
from convengine.audit.collector import VERBOSE_STAGE
from convengine.audit.events import AuditEvent
from convengine.audit.trace import empty_trace
from convengine.catalog.booleans import truthy
from convengine.catalog.errors import (
    ConfigValidationError,
    ConvEngineError,
    ConversationNotFoundError,
    ErrorCode,
)
from convengine.engine import Engine

router = APIRouter(route_class=DepthCheckedRoute)
# Declared as a UUID in the OpenAPI schema but checked by the engine, so a bad id gets
# ConvEngine's INVALID_CONVERSATION_ID error rather than FastAPI's generic one.
ConversationId = Annotated[str, Path(description="The conversation's UUID.", json_schema_extra={"format": "uuid"})]
REFUSALS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (401, 404, 422)}


# Spring's boolean words, as ConvEngine's ``?warmup=`` takes them (declared as text so the schema says what is sent;
# read with convengine.catalog.booleans like every other yes/no value).
Warmup = Annotated[Literal["true", "false", "1", "0", "yes", "no", "on", "off"],
                   Query(description="Also read every control table from the database and time it (default true).")]


# Dependencies are ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread
# hop per dependency per request that cost an HTTP turn more than the rest of its HTTP handling.
async def engine_of(request: Request) -> Engine:
    return request.app.state.engine


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    owner: str | None
    """What the engine checks conversations against; None: any conversation (admin, or ownership off)."""


async def caller_of(request: Request) -> Caller:
    return _caller(request)


def _caller(request: Request) -> Caller:
    principal: Principal = request.state.principal
    config: ApiConfig = request.app.state.api
    owner = principal.identity if config.ownership and not principal.admin else None
    return Caller(principal, owner)


async def admin_of(request: Request) -> Caller:
    caller = _caller(request)
    if not caller.principal.admin:
        raise ApiRefusal(403, ErrorCode.FORBIDDEN, "this endpoint needs an admin key (settings api.auth.admin_keys)")
    return caller


EngineDep = Annotated[Engine, Depends(engine_of)]
CallerDep = Annotated[Caller, Depends(caller_of)]
AdminDep = Annotated[Caller, Depends(admin_of)]


def streams_of(request: Request) -> StreamRegistry:
    return request.app.state.streams


def error_reply(conversation_id: str | None, error: ConvEngineError) -> MessageResponse:
    """ConvEngine's error contract: HTTP 200, intent/state ERROR, payload ERROR with a JSON string value."""
    body = error.to_payload()
    return MessageResponse(success=False, conversationId=conversation_id, intent="ERROR", state="ERROR",
                           payload={"type": "ERROR", "value": json.dumps(body)}, context="{}",
                           errorCode=body["errorCode"], recoverable=body["recoverable"], message=body["message"])


async def post_message(request: Request) -> Response:
    """Process one user message (one turn)."""
    # The hot path: the body, engine and caller read here with the functions the declared body and the
    # dependencies use (no per-request dependency solving); the reply sent as FastAPI would serialise it.
    body = await read_body(request, MessageRequest)
    engine = await engine_of(request)
    caller = await caller_of(request)
    try:
        _check_reservation(request, body.conversationId, caller)
        message = "" if body.message is None else body.message  # ConvEngine: a missing message is empty text
        result = await engine.aprocess(message, body.conversationId, body.inputParams, body.reset,
                                       owner=caller.owner, user_id=body.userId)
    except ConvEngineError as exc:
        if isinstance(exc, ANSWERED_BY_STATUS):
            raise  # the caller's mistake (4xx), or a full server (503 SERVER_BUSY)
        return json_reply(error_reply(exc.details.get("conversationId") or body.conversationId, exc))
    return json_reply(MessageResponse(success=True, conversationId=result.conversation_id, intent=result.intent,
                                      state=result.state, payload=PayloadBody.of(result.payload),
                                      context=json.dumps(result.context, ensure_ascii=False, default=str)))


def add_direct_routes(app: FastAPI) -> None:
    """The hot path's routes (:class:`RequestRoute`, called directly), on the app itself: a route of an included
    router is matched twice per request. Declared as FastAPI declares a body and a response model."""
    app.router.add_api_route("/api/v1/conversation/message", post_message, methods=["POST"],
                             route_class_override=RequestRoute, response_model=MessageResponse, tags=["conversation"],
                             responses={**REFUSALS, 413: {"model": ErrorBody}, 503: {"model": ErrorBody}},
                             openapi_extra=json_body(MessageRequest))


REPLY = TypeAdapter(MessageResponse)


def json_reply(reply: MessageResponse) -> Response:
    """``reply`` as the bytes FastAPI sends for a ``response_model=MessageResponse`` route (pydantic's JSON), without
    validating again the model just built."""
    return Response(REPLY.dump_json(reply), media_type="application/json")


def _check_reservation(request: Request, conversation_id: str | None, caller: Caller) -> None:
    """404 for an id another caller's stream holds before its first turn (ownership on)."""
    if conversation_id is None or caller.owner is None:
        return
    cid = normalise_conversation_id(conversation_id)
    if streams_of(request).reserved_by_other(cid, caller.owner):
        raise ConversationNotFoundError(f"no conversation {cid}")


@router.get("/api/v1/conversation/audit/{conversation_id}", response_model=list[AuditRow], tags=["audit"],
            responses=REFUSALS)
async def get_audit(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> list[dict[str, Any]]:
    """Every audit row of a conversation, oldest first; ``[]`` before its first turn.

    A conversation the caller may not read answers ``[]`` too, exactly like one that has not
    started, so the answer never tells whether another caller's conversation exists.
    """
    try:
        events = await engine.aaudit(conversation_id, owner=caller.owner)
    except ConversationNotFoundError:
        return []
    return [e.to_dict() for e in events]


@router.get("/api/v1/conversation/audit/{conversation_id}/trace", tags=["audit"], responses=REFUSALS)
async def get_trace(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> dict[str, Any]:
    """The audit trail as a tree of steps and their stages; empty before the first turn (as ``/audit``)."""
    cid = normalise_conversation_id(conversation_id)
    try:
        return await engine.atrace(cid, owner=caller.owner)
    except ConversationNotFoundError:
        return empty_trace(cid)


@router.post("/api/v1/conversation/feedback", response_model=FeedbackResponse, tags=["conversation"],
             responses=REFUSALS)
async def post_feedback(body: FeedbackRequestBody, request: Request, engine: EngineDep,
                        caller: CallerDep) -> dict[str, Any]:
    """Store a thumbs-up/down on the conversation's latest turn (``ce_mcp_user_feedback``)."""
    _check_reservation(request, body.conversationId, caller)
    feedback = await engine.afeedback(body.conversationId, body.feedbackType, message_id=body.messageId,
                                      assistant_response=body.assistantResponse, metadata=body.metadata,
                                      owner=caller.owner)
    return feedback.response()


@router.get("/api/v1/conversation/feedback/{conversation_id}", response_model=list[FeedbackRow],
            tags=["conversation"], responses=REFUSALS)
async def get_feedback(conversation_id: ConversationId, engine: EngineDep, caller: CallerDep) -> list[dict[str, Any]]:
    """The feedback stored on a conversation, oldest first; ``[]`` when there is none to show (as ``/audit``)."""
    try:
        rows = await engine.afeedbacks(conversation_id, owner=caller.owner)
    except ConversationNotFoundError:
        return []
    return [row.to_dict() for row in rows]


def sse_event(event: AuditEvent) -> dict[str, str]:
    """ConvEngine's AuditStreamEventResponse: an AUDIT event per stage, a VERBOSE event per verbose message
    (``payload.verbose`` and ``verbose`` both carry the message, as ConvEngine sends them)."""
    if event.stage == VERBOSE_STAGE:
        body = event.payload.get("verbose")
        data = {"eventType": VERBOSE_STAGE, "auditId": None, "stage": VERBOSE_STAGE,
                "createdAt": event.created_at.isoformat(), "payload": {"verbose": body}, "verbose": body}
    else:
        data = {"eventType": "AUDIT", "auditId": event.audit_id, "stage": event.stage,
                "createdAt": event.created_at.isoformat(), "payload": event.stored_payload(), "verbose": None}
    return {"event": event.stage, "data": json.dumps(data, ensure_ascii=False, default=str)}


SSE_EVENT: dict[str, Any] = {
    "type": "object", "required": ["data"], "description": "A CONNECTED event first ({conversationId, transport}), "
    "then one event per audit stage, named by it (eventType, auditId, stage, createdAt, payload, verbose).",
    "properties": {"event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"},
                   "data": {"type": "string", "contentMediaType": "application/json",
                            "contentSchema": {"type": "object"}}}}
"""One server-sent event (OpenAPI 3.2's ``itemSchema`` of ``text/event-stream``)."""


class LeasedStream(EventSourceResponse):
    """An SSE response that gives its stream's slot back however it ends."""

    def __init__(self, content: AsyncIterator[dict[str, str]], lease: Lease) -> None:
        super().__init__(content, ping=15)
        self.lease = lease

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.lease.release()


@router.get("/api/v1/conversation/stream/{conversation_id}", tags=["conversation"],
            response_class=EventSourceResponse, responses={**REFUSALS, 429: {"model": ErrorBody}, 200: {
                "description": "Server-sent events (ConvEngine's AuditStreamEventResponse as each event's data).",
                "content": {"text/event-stream": {"itemSchema": SSE_EVENT}}}})
async def stream(conversation_id: ConversationId, request: Request, engine: EngineDep, caller: CallerDep) -> Any:
    """Server-sent events: ``CONNECTED`` first, then every audit event of the conversation as it happens.

    A conversation that has not started yet may be streamed (the stream closes when no turn arrives
    within ``api.streams.idle_timeout_s``); with ownership on, the id is then reserved to the caller.
    """
    settings = engine.settings
    if not settings.transport.sse.enabled:
        return error_response(404, "NOT_FOUND", "SSE streaming is disabled")
    cid = normalise_conversation_id(conversation_id)
    _check_reservation(request, cid, caller)
    exists = await engine.acheck_access(cid, caller.owner)
    pending = not exists and caller.owner is not None
    lease = streams_of(request).open(settings.api.streams, caller.principal.identity, cid, reserve=pending)
    return LeasedStream(_events(engine, request, cid, caller, exists), lease)


async def _events(engine: Engine, request: Request, cid: str, caller: Caller,
                  exists: bool) -> AsyncIterator[dict[str, str]]:
    settings = engine.settings
    subscription = engine.subscribe(cid)
    try:
        bridge = getattr(request.app.state, "bridge", None)
        if bridge is not None:
            await bridge.announced()  # other processes now send this conversation's events here
        yield {"event": "CONNECTED", "data": json.dumps({"conversationId": cid, "transport": "SSE"})}
        watch = Watch(subscription.queue, settings.transport.sse.emitter_timeout_ms / 1000,
                      None if exists else settings.api.streams.idle_timeout_s,
                      None if caller.owner is None else lambda: engine.acheck_access(cid, caller.owner))
        async for event in watch.events(request.is_disconnected):
            yield sse_event(event)
    finally:
        engine.bus.unsubscribe(subscription)


@router.post("/api/v1/cache/refresh", response_class=PlainTextResponse, tags=["cache"],
             responses={**REFUSALS, 403: {"model": ErrorBody}})
async def refresh(engine: EngineDep, _: AdminDep) -> Any:
    """Reload and re-validate the control tables; on failure the current configuration stays (admin)."""
    try:
        snapshot = await engine.areload()
    except ConfigValidationError as exc:
        return JSONResponse(status_code=422, content=ErrorBody(
            errorCode=exc.code.value, message=exc.message, details=[{"violation": v} for v in exc.details["violations"]]
        ).model_dump())
    return f"Cache refreshed: configuration version {snapshot.version}"


@router.get("/api/v1/cache/analyze", tags=["cache"], responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}})
async def analyze(engine: EngineDep, _: AdminDep, warmup: Warmup = "true") -> dict[str, Any]:
    """What the engine keeps in memory, in ConvEngine's shape (``cacheProvider``, ``staticCaches``,
    ``runtimeCaches``, and with ``warmup`` (the default, as ConvEngine) ``warmupTimingMs``), plus the
    snapshot's statistics and the main settings (admin)."""
    report = await engine.acache_report(truthy(warmup))
    report["snapshot"] = engine.snapshot.statistics()
    report["settings"] = {"dialogueAct": engine.settings.flow.dialogue_act.resolute,
                          "auditLevel": engine.settings.audit.level, "sse": engine.settings.transport.sse.enabled}
    return report


NO_STORE = {"Cache-Control": "no-store"}


@router.get("/health", tags=["health"], response_model=HealthBody)
async def health(engine: EngineDep) -> JSONResponse:
    """Liveness and the configuration version in use (no authentication, nothing about the database:
    it stays 200 while the database is down; see ``/ready``)."""
    return JSONResponse({"status": "ok", "configVersion": engine.snapshot.version}, headers=NO_STORE)


@router.get("/ready", tags=["health"], response_model=ReadyBody,
            responses={503: {"model": ReadyBody, "description": "Not ready: the database does not answer."}})
async def ready(request: Request) -> JSONResponse:
    """Readiness: 200 while the database answers, 503 ``DATABASE_UNAVAILABLE`` while it does not (no
    authentication; the probe runs at most once per ``api.readiness.cache_s`` and takes at most
    ``api.readiness.timeout_s``)."""
    state = await request.app.state.readiness.check()
    if state.ready:
        return JSONResponse({"status": "ready"}, headers=NO_STORE)
    body = ReadyBody(status="unavailable", errorCode=ErrorCode.DATABASE_UNAVAILABLE.value, message=state.message)
    return JSONResponse(body.model_dump(), status_code=503, headers=NO_STORE)
