"""HTTP endpoints of versioned configuration (admin scope only): list, read, diff, draft, edit, publish,
rollback, point channels, and the simulator (a turn on the draft or a chosen version).

Only an admin may choose what a turn runs on: the public message endpoint ignores any ``draft`` or
``version`` field, so a user's conversation always runs on its pinned version. A publish runs the
conversation tests the server was configured with (``conversation_tests``), never paths from a request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from convengine.api.admission import ANSWERED_BY_STATUS
from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import error_response
from convengine.api.routes import REFUSALS, AdminDep, EngineDep, error_reply
from convengine.api.schemas import UUID_TEXT, ErrorBody, MessageResponse, PayloadBody, ResetFlag
from convengine.catalog.errors import ConfigError, ConfigValidationError, ConvEngineError
from convengine.config_loader.packs import redact_pack
from convengine.engine.results import TurnResult
from convengine.versions.content import LIVE_CHANNEL
from convengine.versions.lifecycle import (
    DraftNotNamedError,
    GateRequiredError,
    PublishRefusedError,
    ReplayChangedError,
)
from convengine.versions.store import (
    CHANNEL_PATTERN,
    MAX_VERSION,
    TARGET_CHANNEL_PATTERN,
    VersionNotFoundError,
)

TARGET_CHANNEL: dict[str, Any] = {"pattern": TARGET_CHANNEL_PATTERN}
"""Declared only: the engine checks it (pydantic's regex engine has no lookahead)."""
router = APIRouter(route_class=DepthCheckedRoute, prefix="/api/v1/versions", tags=["versions"])
ADMIN_REFUSALS: dict[int | str, dict[str, Any]] = {**REFUSALS, 403: {"model": ErrorBody}, 409: {"model": ErrorBody}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DraftBody(_Body):
    pack: dict[str, Any] = Field(description="The whole pack: table name -> rows, and optional settings.")
    message: str | None = None


class EditBody(_Body):
    upsert: dict[str, list[dict[str, Any]]] = Field(default_factory=dict,
                                                    description="Rows per table, matched by primary key.")
    delete: dict[str, list[Any]] = Field(default_factory=dict, description="Primary keys per table.")
    message: str | None = None


class PublishBody(_Body):
    channel: str = Field(LIVE_CHANNEL, json_schema_extra=TARGET_CHANNEL)
    version: int | None = Field(None, ge=1, le=MAX_VERSION,
                                description="Publish this version instead of the draft.")
    draft: int | None = Field(None, ge=1, le=MAX_VERSION, description=(
        "The draft to publish (its version number): refused (409 DRAFT_NOT_NAMED) when it is not the draft "
        "any more. Needed when the draft holds another author's edits."))
    message: str | None = None
    acceptChanges: bool = Field(False, description=(
        "Publish even when replaying the last conversations changes more of them than "
        "versions.replay_gate.max_changed allows (kept in the channel's history); else 409 REPLAY_CHANGED."))


class RollbackBody(_Body):
    version: int = Field(ge=1, le=MAX_VERSION)
    channel: str = Field(LIVE_CHANNEL, json_schema_extra=TARGET_CHANNEL)
    message: str | None = None


class ChannelBody(_Body):
    version: int = Field(ge=1, le=MAX_VERSION)
    migration: Literal["pin", "latest"] | None = Field(None, description="pin (default) or latest.")
    gated: bool | None = Field(None, description="Make the channel gated (true) or not (false, needs an override).")
    override: str | None = Field(None, min_length=1, max_length=2_000, description=(
        "Why a gated channel may serve a version that did not pass the publish gate (kept in its history "
        "as OVERRIDE); without it such a move is refused (409 GATE_REQUIRED)."))
    message: str | None = None


class SimulateBody(_Body):
    message: str | None = None
    conversationId: str | None = Field(None, json_schema_extra=UUID_TEXT)
    inputParams: dict[str, Any] | None = None
    reset: ResetFlag = False
    draft: bool = Field(True, description="Run on the draft (default) ...")
    version: int | None = Field(None, ge=1, le=MAX_VERSION,
                                description="... or on this version (then draft is ignored).")


class SimulateStartBody(_Body):
    conversationId: str | None = Field(None, json_schema_extra=UUID_TEXT)
    inputParams: dict[str, Any] | None = None
    draft: bool = Field(True, description="Start on the draft (default) ...")
    version: int | None = Field(None, ge=1, le=MAX_VERSION,
                                description="... or on this version (then draft is ignored).")


async def _call(work: Callable[[], Any]) -> Any:
    """Run a synchronous version operation off the loop; its refusals in the API's error shape."""
    try:
        return await asyncio.to_thread(work)
    except PublishRefusedError as exc:
        details = [{"failedTest": name} for name in exc.details.get("failed", [])]
        details += [{"violation": v} for v in exc.details.get("violations", [])]
        return error_response(409, exc.code, exc.message, details=details)
    except (GateRequiredError, DraftNotNamedError) as exc:
        return error_response(409, exc.code, exc.message, details=[exc.details])
    except ReplayChangedError as exc:
        return error_response(409, exc.code, exc.message,
                              details=[{"changedConversation": cid} for cid in exc.details["changed"]])
    except VersionNotFoundError as exc:
        return error_response(404, exc.code, exc.message)
    except ConfigValidationError as exc:
        return error_response(422, exc.code, exc.message, details=[{"violation": str(v)} for v in exc.violations])
    except ConfigError as exc:  # a pack that cannot be read or stored
        return error_response(422, exc.code, exc.message)


class Describable(Protocol):
    """A version, channel or table diff: what it says of itself as JSON."""

    def to_dict(self) -> dict[str, Any]: ...


def _dict(value: JSONResponse | Describable) -> JSONResponse | dict[str, Any]:
    return value if isinstance(value, JSONResponse) else value.to_dict()


@router.get("", responses=ADMIN_REFUSALS)
async def list_versions(engine: EngineDep, _: AdminDep) -> Any:
    """Every version (oldest first) and every channel with the version it serves."""
    versions = engine.versions
    listed, channels = await asyncio.gather(asyncio.to_thread(versions.list), asyncio.to_thread(versions.channels))
    return {"versions": [v.to_dict() for v in listed], "channels": [c.to_dict() for c in channels]}


@router.get("/diff", responses=ADMIN_REFUSALS)
async def diff_versions(engine: EngineDep, _: AdminDep, a: int = Query(..., ge=1, le=MAX_VERSION),
                        b: int = Query(..., ge=1, le=MAX_VERSION)) -> Any:
    """What changed from version ``a`` to version ``b``, table by table and row by row (secrets masked)."""
    result = await _call(lambda: engine.versions.diff(a, b))
    if isinstance(result, JSONResponse):
        return result
    tables, _masked = redact_pack({"tables": [t.to_dict() for t in result]})
    return {"from": a, "to": b, **tables}


@router.get("/history", responses=ADMIN_REFUSALS)
async def history(engine: EngineDep, _: AdminDep,
                  channel: str | None = Query(None, json_schema_extra={"pattern": CHANNEL_PATTERN})) -> Any:
    """Every move of a channel (publish, rollback, import, point), oldest first."""
    return await _call(lambda: engine.versions.history(channel))


@router.get("/{number}", responses=ADMIN_REFUSALS)
async def read_version(engine: EngineDep, _: AdminDep, number: int = Path(ge=1, le=MAX_VERSION)) -> Any:
    """One version and its pack (secrets masked as ``***``)."""
    info = await _call(lambda: engine.versions.info(number))
    if isinstance(info, JSONResponse):
        return info
    pack, _masked = redact_pack(await asyncio.to_thread(engine.versions.content, number))
    return {**info.to_dict(), "pack": pack}


@router.post("/draft", status_code=201, responses=ADMIN_REFUSALS)
async def draft(body: DraftBody, engine: EngineDep, caller: AdminDep) -> Any:
    """A new draft holding a whole pack; nothing users get changes until it is published."""
    who = caller.principal.identity
    return _dict(await _call(lambda: engine.versions.draft(body.pack, author=who, message=body.message)))


@router.patch("/draft", responses=ADMIN_REFUSALS)
async def edit(body: EditBody, engine: EngineDep, caller: AdminDep) -> Any:
    """A new draft: the draft's rows with ``upsert`` rows and without ``delete`` keys."""
    who = caller.principal.identity
    return _dict(await _call(lambda: engine.versions.edit(upsert=body.upsert, delete=body.delete, author=who,
                                                          message=body.message)))


@router.post("/publish", responses=ADMIN_REFUSALS)
async def publish(body: PublishBody, engine: EngineDep, caller: AdminDep) -> Any:
    """Publish the draft when it validates and the server's conversation tests pass (409 names the failures);
    ``draft`` names the draft published (needed when it holds another author's edits)."""
    who = caller.principal.identity
    return _dict(await _call(lambda: engine.versions.publish(channel=body.channel, version=body.version,
                                                             draft=body.draft, author=who, message=body.message,
                                                             accept_changes=body.acceptChanges)))


@router.post("/rollback", responses=ADMIN_REFUSALS)
async def rollback(body: RollbackBody, engine: EngineDep, caller: AdminDep) -> Any:
    """Serve a version the channel served before; running conversations keep theirs."""
    who = caller.principal.identity
    return _dict(await _call(lambda: engine.versions.rollback(body.version, channel=body.channel, author=who,
                                                              message=body.message)))


@router.put("/channels/{name}", responses=ADMIN_REFUSALS)
async def point(body: ChannelBody, engine: EngineDep, caller: AdminDep,
                name: str = Path(json_schema_extra={"pattern": TARGET_CHANNEL_PATTERN})) -> Any:
    """Point a channel (environment) at a version, or set its migration policy. A gated channel
    (``production``) takes only a version that passed the publish gate, unless ``override`` says why."""
    who = caller.principal.identity
    return _dict(await _call(lambda: engine.versions.point(name, body.version, migration=body.migration,
                                                           author=who, message=body.message,
                                                           override=body.override, gated=body.gated)))


@router.post("/simulate", response_model=MessageResponse, responses=ADMIN_REFUSALS)
async def simulate(body: SimulateBody, engine: EngineDep, _: AdminDep) -> Any:
    """One turn on the draft (or a chosen version) without publishing it: the simulator."""
    draft = body.version is None and body.draft
    return await _simulated(engine.aprocess(body.message or "", body.conversationId, body.inputParams, body.reset,
                                            draft=draft, version=body.version), body.conversationId)


@router.post("/simulate/start", response_model=MessageResponse, responses=ADMIN_REFUSALS)
async def simulate_start(body: SimulateStartBody, engine: EngineDep, _: AdminDep) -> Any:
    """Start a conversation with the welcome event on the draft (or a chosen version): the simulator's
    ``/api/v1/conversation/start``."""
    draft = body.version is None and body.draft
    return await _simulated(engine.astart(body.conversationId, body.inputParams, draft=draft, version=body.version),
                            body.conversationId)


async def _simulated(turn: Awaitable[TurnResult], conversation_id: str | None) -> Any:
    """A simulated turn's reply, or its refusal in the API's error shape."""
    try:
        result = await turn
    except VersionNotFoundError as exc:
        return error_response(404, exc.code, exc.message)
    except ConvEngineError as exc:
        if isinstance(exc, ANSWERED_BY_STATUS):
            raise
        return error_reply(exc.details.get("conversationId") or conversation_id, exc)
    return MessageResponse(success=True, conversationId=result.conversation_id, intent=result.intent,
                           state=result.state, payload=PayloadBody.of(result.payload),
                           context=json.dumps(result.context, ensure_ascii=False, default=str))
