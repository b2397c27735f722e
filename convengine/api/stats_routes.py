"""Analytics over HTTP: ``GET /api/v1/stats`` answers :meth:`Engine.stats` as JSON (camelCase).

Scoped like every conversation read: with conversation ownership on (API keys configured), a user
key (or a tenant's keys) counts only the conversations it created; an admin key counts them all.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from convengine.analytics import Stats
from convengine.api.body import DepthCheckedRoute
from convengine.api.console_routes import Instant
from convengine.api.routes import REFUSALS, CallerDep, EngineDep
from convengine.versions.store import MAX_VERSION

router = APIRouter(route_class=DepthCheckedRoute)
BY_PATTERN = r"^(intent|state|day)(,(intent|state|day)){0,2}$"


@router.get("/api/v1/stats", tags=["analytics"], responses=REFUSALS, response_model=Stats, response_model_by_alias=True)
async def stats(engine: EngineDep, caller: CallerDep,
                since: Annotated[Instant | None, Query(description="turns at or after (RFC 3339, with a zone)")] = None,
                until: Annotated[Instant | None, Query(description="turns before (RFC 3339, with a zone)")] = None,
                by: Annotated[str, Query(pattern=BY_PATTERN, description="group by intent, state and/or day, "
                                         "comma-separated (e.g. intent,day); empty: the total only")] = "",
                intent: Annotated[str | None, Query(max_length=200, description="only this intent")] = None,
                version: Annotated[int | None, Query(ge=1, le=MAX_VERSION, description="only conversations on this "
                                                                       "configuration version")] = None,
                idle_after_s: Annotated[float, Query(alias="idleAfterS", gt=0, le=31_536_000, description=(
                    "a conversation idle this long (not ended, not handed off) dropped off"))] = 1800.0,
                ) -> Any:
    """Conversations, turns, drop-off, fallback and UNKNOWN rates, handoffs, containment, feedback, model
    calls, tokens and estimated cost, in total and per group (the caller's own conversations)."""
    found: Stats = await engine.astats(since=since, until=until, by=by, intent=intent, version=version,
                                       owner=caller.owner, idle_after_s=idle_after_s)
    return found
