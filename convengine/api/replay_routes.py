"""``POST /api/v1/versions/replay``: recorded conversations replayed against the draft or a version.

A caller needs the ``replay`` scope (:data:`REPLAY_SCOPE`; an admin has every scope). An admin
replays any conversation; any other caller only the conversations it created (its identity, or its
tenant's), whatever the body says: the body has no field naming an owner or conversations.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import ApiRefusal
from convengine.api.routes import REFUSALS, CallerDep, EngineDep
from convengine.api.schemas import ErrorBody
from convengine.api.version_routes import ADMIN_REFUSALS, _call, _dict
from convengine.catalog.errors import ErrorCode
from convengine.engine.replay_models import MAX_REPLAY
from convengine.versions.store import MAX_VERSION

REPLAY_SCOPE = "replay"
"""Replay one's own recorded conversations against the draft or a version (admins: every conversation)."""
REPLAY_RETRY_AFTER_S = 5
router = APIRouter(route_class=DepthCheckedRoute, prefix="/api/v1/versions", tags=["versions"])


class ReplayBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    draft: int | None = Field(None, ge=1, le=MAX_VERSION, description="The draft (its version number; default: "
                                                                         "the draft).")
    version: int | None = Field(None, ge=1, le=MAX_VERSION, description="Replay against this version instead.")
    last: int = Field(50, ge=1, le=MAX_REPLAY, description="The latest N conversations.")
    intent: str | None = Field(None, max_length=200)
    feedback: Literal["up", "down"] | None = None
    since: datetime | None = None
    until: datetime | None = None
    ranOn: int | None = Field(None, ge=1, le=MAX_VERSION, description="Conversations pinned to this version.")
    liveLlm: bool = Field(False, description="Call the live model for calls the recording cannot answer (admin).")


BUSY: dict[int | str, dict[str, Any]] = {503: {"model": ErrorBody, "description": "Another replay is running (SERVER_BUSY; one runs at a time): "
                                                 "retry after Retry-After seconds."}}


@router.post("/replay", responses={**REFUSALS, **ADMIN_REFUSALS, **BUSY})
async def replay(body: ReplayBody, engine: EngineDep, caller: CallerDep, request: Request) -> Any:
    """Replay recorded conversations against the draft (or ``version``): the turns where it differs, and
    the conversations whose recording cannot be replayed (scope ``replay``; a non-admin: its own only)."""
    principal = caller.principal
    if not principal.may(REPLAY_SCOPE):
        raise ApiRefusal(403, ErrorCode.FORBIDDEN, "replaying conversations needs the replay scope (or an admin key)")
    if body.liveLlm and not principal.admin:
        raise ApiRefusal(403, ErrorCode.FORBIDDEN, "liveLlm needs an admin key")
    owner = None if principal.admin else principal.identity
    running = _replay_lock(request)
    if running.locked():  # a replay runs its turns on the server's event loop: one at a time
        raise ApiRefusal(503, ErrorCode.SERVER_BUSY, "another replay is running on this server; retry when it ends",
                         headers={"Retry-After": str(REPLAY_RETRY_AFTER_S)})
    async with running:
        report = await _call(lambda: engine.replay(
            draft=body.draft or True, version=body.version, live_llm=body.liveLlm, owner=owner, last=body.last,
            intent=body.intent, feedback=body.feedback, since=body.since, until=body.until, ran_on=body.ranOn))
    return _dict(report)


def _replay_lock(request: Request) -> asyncio.Lock:
    """The app's one replay slot (created on first use, on the app's event loop)."""
    state = request.app.state
    lock: asyncio.Lock | None = getattr(state, "replay_lock", None)
    if lock is None:
        lock = state.replay_lock = asyncio.Lock()
    return lock
