"""The web console (``/console``) and offline API docs (``/docs``), every asset served from the package.

The console's page and its static files carry no data and are public (a browser cannot send an
API key with a page load); every data endpoint under ``/console/api`` needs an admin caller, as
``/api/v1/cache/*`` does. The page asks for the key and sends it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from pydantic import AfterValidator, AwareDatetime, BeforeValidator
from starlette.concurrency import run_in_threadpool

from convengine._internal.turn_io import normalise_conversation_id
from convengine.api.body import DepthCheckedRoute
from convengine.api.refusals import ApiRefusal
from convengine.api.routes import REFUSALS, AdminDep, ConversationId, EngineDep
from convengine.catalog.errors import ConversationNotFoundError, ErrorCode
from convengine.config.records import Record
from convengine.console import graphs, queries, turns
from convengine.console.export import export_conversation
from convengine.engine import Engine

STATIC = Path(__file__).resolve().parent.parent / "console" / "static"
ASSETS = {"console.js": "text/javascript", "console.css": "text/css", "index.html": "text/html",
          "replay.js": "text/javascript", "analytics.js": "text/javascript", "analytics.css": "text/css"}
DOCS_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")
"""Swagger UI from the fastapi-offline package (MIT), so /docs needs no CDN. (No /redoc: ReDoc's page
still loads its logo from the internet.)"""
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; style-src 'self' "
                    "'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
ADMIN: dict[int | str, dict[str, Any]] = {**REFUSALS, 403: REFUSALS[401]}

router = APIRouter(route_class=DepthCheckedRoute)
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339(value: object) -> object:
    """An RFC 3339 date-time, as the schema's ``format: date-time`` says (not a number of seconds)."""
    if isinstance(value, str) and not RFC3339.fullmatch(value):
        raise ValueError("expected an RFC 3339 date-time with a time zone, e.g. 2025-01-31T09:30:00Z")
    return value


def _has_utc(value: datetime) -> datetime:
    """Refuse an instant with no UTC time (year 1 at +14:00, year 9999 at -14:00): a 422 naming it, not a 500."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range: its UTC time falls outside years 1 to 9999") from None
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339), AfterValidator(_has_utc)]


def public_paths() -> list[str]:
    """The console page, its assets and the docs assets: served without credentials."""
    return ["/console", "/console/", *(f"/console/static/{name}" for name in ASSETS),
            "/docs", *(f"/docs/assets/{name}" for name in DOCS_ASSETS)]


def install(app: FastAPI) -> None:
    """Add the console, its data endpoints and the offline ``/docs`` to ``app``."""
    app.include_router(router)
    app.add_api_route("/docs", _docs_page, include_in_schema=False)
    app.add_api_route("/docs/assets/{name}", _docs_asset, include_in_schema=False)


@router.get("/console", include_in_schema=False)
@router.get("/console/", include_in_schema=False)
async def console_page() -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=SECURITY_HEADERS)


@router.get("/console/static/{name}", include_in_schema=False)
async def console_asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(404, f"no console asset {name[:100]!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=SECURITY_HEADERS)


async def _docs_page(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=request.app.openapi_url, title="convengine API",
                               swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs/assets/swagger-ui.css",
                               swagger_favicon_url="/docs/assets/favicon.png",
                               swagger_ui_parameters={"validatorUrl": None})


async def _docs_asset(name: str) -> Response:
    import fastapi_offline

    if name not in DOCS_ASSETS:
        raise HTTPException(404, f"no docs asset {name[:100]!r}")
    return FileResponse(Path(fastapi_offline.__file__).parent / "static" / name)


@router.get("/console/api/info", tags=["console"], responses=ADMIN)
async def info(engine: EngineDep, _: AdminDep, request: Request) -> dict[str, Any]:
    """What the console shows in its header: configuration version, database, whether LLM calls are logged."""
    settings = engine.settings
    return {"configVersion": engine.snapshot.version, "database": engine.database_label,
            "llmCallsLogged": bool(settings.llm.log_calls), "sse": bool(settings.transport.sse.enabled),
            "pack": _pack_name(request)}


@router.get("/console/api/conversations", tags=["console"], responses=ADMIN)
async def conversation_list(engine: EngineDep, _: AdminDep,
                            q: Annotated[str, Query(max_length=queries.SEARCH_MAX_CHARS)] = "",
                            limit: Annotated[int, Query(ge=1, le=queries.MAX_LIST)] = 50,
                            feedback: Annotated[queries.FeedbackFilter | None, Query(
                                description="ANY, NONE, THUMBS_UP or THUMBS_DOWN")] = None,
                            since: Annotated[Instant | None, Query(
                                description="last activity at or after (ISO 8601 with a time zone)")] = None,
                            until: Annotated[Instant | None, Query(
                                description="last activity before (ISO 8601 with a time zone)")] = None,
                            ) -> list[dict[str, Any]]:
    """The latest conversations, searchable by id, user, intent, state, status and feedback, and
    filtered by feedback and last activity (admin)."""
    return await queries.conversations(engine, q, limit, feedback=feedback, since=since, until=until)


@router.get("/console/api/conversations/{conversation_id}/turns", tags=["console"], responses=ADMIN)
async def turn_list(conversation_id: ConversationId, engine: EngineDep, _: AdminDep) -> dict[str, Any]:
    """The conversation's turns, oldest first, with whether each was undone (admin)."""
    cid = normalise_conversation_id(conversation_id)
    cut = turns.split_turns(await _audit(engine, cid))
    undone = turns.undone_marks(cut, await engine.asteps(cid))
    listed = [{**turns.summary(number, events), "undone": mark}
              for number, (events, mark) in enumerate(zip(cut, undone, strict=True), start=1)]
    return {"conversationId": cid, "turns": listed}


@router.get("/console/api/conversations/{conversation_id}/turns/{number}", tags=["console"], responses=ADMIN)
async def turn_view(conversation_id: ConversationId, number: int, engine: EngineDep, _: AdminDep) -> dict[str, Any]:
    """One turn: step tree, rules, LLM calls with prompts and replies, tool calls, state before and after (admin)."""
    cid = normalise_conversation_id(conversation_id)
    cut = turns.split_turns(await _audit(engine, cid))
    if not 1 <= number <= len(cut):
        raise HTTPException(404, f"conversation {cid} has {len(cut)} turn(s), not a turn {number}")
    rows = await queries.llm_log(engine, cid)
    before = sum(1 for events in cut[:number - 1] for e in events if turns.logged_llm_call(e))
    mine = sum(1 for e in cut[number - 1] if turns.logged_llm_call(e))
    return turns.view(number, cut[number - 1], rows[before:before + mine])


@router.get("/console/api/conversations/{conversation_id}/export", tags=["console"], response_class=Response,
            responses={**ADMIN, 200: {"content": {"application/yaml": {"schema": {"type": "string"}}},
                                      "description": "The conversation test (YAML)."}})
async def export(conversation_id: ConversationId, engine: EngineDep, _: AdminDep, request: Request,
                 upto: Annotated[int | None, Query(ge=1)] = None,
                 pack: Annotated[str | None, Query(max_length=1000)] = None) -> Response:
    """The conversation (its first ``upto`` turns) as a ``.conv.yaml`` test that replays it (admin)."""
    cid = normalise_conversation_id(conversation_id)
    await _audit(engine, cid)
    text = await export_conversation(engine, cid, pack=pack or _pack_name(request) or "PACK.yaml", upto=upto)
    name = f"conversation-{cid[:8]}.conv.yaml"
    return PlainTextResponse(text, media_type="application/yaml",
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/console/api/config", tags=["console"], responses=ADMIN)
async def configuration(engine: EngineDep, _: AdminDep) -> dict[str, Any]:
    """The loaded configuration's tables (rows as columns and values) and its warnings (admin)."""
    snapshot = engine.snapshot
    tables = {name: [_row(r) for r in rows] for name, rows in sorted(snapshot.tables().items())}
    return {"version": snapshot.version, "tables": tables, "warnings": list(engine.warnings)}


SVG: dict[int | str, dict[str, Any]] = {**ADMIN, 200: {"content": {"image/svg+xml": {"schema": {"type": "string"}}},
                                                    "description": "The graph as an SVG picture."}}


@router.get("/console/api/config/state-graph.svg", tags=["console"], response_class=Response, responses=SVG)
async def state_graph(engine: EngineDep, _: AdminDep) -> Response:
    """The states and their transitions, drawn by Graphviz's dot when installed (admin)."""
    return Response(await run_in_threadpool(graphs.state_graph_svg, engine.snapshot), media_type="image/svg+xml", headers=SECURITY_HEADERS)


@router.get("/console/api/config/turn-graph.svg", tags=["console"], response_class=Response, responses=SVG)
async def turn_graph(engine: EngineDep, _: AdminDep) -> Response:
    return Response(await run_in_threadpool(graphs.turn_graph_svg, engine.graph), media_type="image/svg+xml", headers=SECURITY_HEADERS)


@router.get("/console/api/config/workflows.svg", tags=["console"], response_class=Response, responses=SVG)
async def workflow_graph(engine: EngineDep, _: AdminDep) -> Response:
    """The configuration's workflows: nodes, edges with their conditions, sub-workflow hand-overs (admin)."""
    return Response(await run_in_threadpool(graphs.workflow_graph_svg, engine.snapshot), media_type="image/svg+xml", headers=SECURITY_HEADERS)


async def _audit(engine: Engine, cid: str) -> list[Any]:
    try:
        return await engine.aaudit(cid)
    except ConversationNotFoundError:
        raise ApiRefusal(404, ErrorCode.CONVERSATION_NOT_FOUND, f"no conversation {cid}") from None


def _pack_name(request: Request) -> str | None:
    pack = getattr(request.app.state, "console_pack", None)
    return str(pack) if pack else None


def _row(record: Record) -> dict[str, Any]:
    shown = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.repr}
    return json.loads(json.dumps(shown, default=str))
