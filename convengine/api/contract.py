"""The served OpenAPI schema states what the server does: every refusal a route can answer, in the
API's error shape (``application/json`` ``ErrorBody``, whatever the route's success media type), and
who may call it.

Refusals that do not belong to one route (middleware, request validation, authentication, admin
scope) are declared once, in :data:`COMMON_REFUSALS`: each says which routes it applies to, and
:func:`install` adds it to every such operation. A new middleware refusal is one more entry there.
Route-specific refusals (404 of an unknown conversation, 409 of a refused undo...) stay on their
routes (``responses=``); their media type is set to JSON here too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, routing
from fastapi.dependencies.models import Dependant
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from convengine.api.body import BODY_MODELS
from convengine.api.routes import admin_of
from convengine.api.schemas import ErrorBody
from convengine.catalog.errors import ErrorCode

REF_TEMPLATE = "#/components/schemas/{model}"
ERROR_SCHEMA = {"$ref": REF_TEMPLATE.format(model="ErrorBody")}
JSON = "application/json"
STATE_CHANGING = frozenset({"post", "put", "patch", "delete"})
TURN_PATHS = ("/api/v1/conversation/message", "/api/v1/conversation/start", "/handoff/resume", "/undo", "/redo",
              "/simulate", "/simulate/start")
"""Operations that run a turn, so pass the engine's admission (503 ``SERVER_BUSY`` past its queue)."""
SECURITY_SCHEMES = {"bearer": {"type": "http", "scheme": "bearer", "description": "An API key (api.auth.api_keys "
                               "or api.auth.admin_keys) as a bearer token; the X-API-Key header is accepted too "
                               "(one scheme is declared: fuzzers read two alternatives as two required headers)."}}


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """What the common refusals need to know of a route."""

    path: str
    method: str
    public: bool
    """Served without credentials (``/health``, ``/ready``, the docs)."""
    admin: bool
    """Needs an admin caller."""
    has_input: bool
    """Takes path or query parameters, or a body."""
    has_body: bool


@dataclass(frozen=True, slots=True)
class CommonRefusal:
    status: int
    codes: tuple[str, ...]
    description: str
    applies: Callable[[RouteInfo], bool]
    headers: Mapping[str, Any] = field(default_factory=dict)


def _everywhere(_: RouteInfo) -> bool:
    return True


COMMON_REFUSALS: list[CommonRefusal] = [
    CommonRefusal(400, (ErrorCode.HOST_NOT_ALLOWED.value, ErrorCode.INVALID_INPUT.value),
                  "A Host header this server does not answer (api.trusted_hosts), or a malformed request.",
                  _everywhere),
    CommonRefusal(401, (ErrorCode.UNAUTHORIZED.value,), "No valid credentials (API key or host authenticator).",
                  lambda r: not r.public,
                  {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}),
    CommonRefusal(403, (ErrorCode.FORBIDDEN.value,), "The endpoint needs an admin key (api.auth.admin_keys).",
                  lambda r: r.admin),
    CommonRefusal(403, (ErrorCode.ORIGIN_NOT_ALLOWED.value,), "A browser request that changes something, sent "
                  "from an origin that is neither the server's own nor in api.cors.allowed_origins.",
                  lambda r: r.method in STATE_CHANGING),
    CommonRefusal(413, (ErrorCode.MESSAGE_TOO_LARGE.value,), "The request body exceeds api.max_body_bytes "
                  "(or the message api.max_message_chars).", _everywhere),
    CommonRefusal(422, (ErrorCode.INVALID_INPUT.value, ErrorCode.INVALID_CONVERSATION_ID.value),
                  "A parameter or the body is invalid; the message names it.", lambda r: r.has_input),
    CommonRefusal(431, (ErrorCode.INVALID_INPUT.value,), "The request head exceeds api.max_header_bytes.",
                  _everywhere),
    CommonRefusal(503, (ErrorCode.SERVER_BUSY.value,), "The process runs as many turns as its pool serves and "
                  "its admission queue is full (admission.*): nothing ran; retry after Retry-After seconds.",
                  lambda r: r.method == "post" and r.path.endswith(TURN_PATHS),
                  {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait before retrying."}}),
    CommonRefusal(500, (ErrorCode.INTERNAL_ERROR.value, ErrorCode.DATABASE_UNAVAILABLE.value),
                  "The server failed (e.g. its database is unavailable); the message says why.",
                  lambda r: not r.public),
]
"""Refusals any route may answer, whoever declares the route. Extend this list for a new middleware refusal."""


def install(app: FastAPI, public: Callable[[], Collection[str]], secured: Callable[[], bool]) -> None:
    """Serve ``app.openapi()`` with :data:`COMMON_REFUSALS`, JSON error bodies and security requirements.

    ``public`` gives the paths served without credentials; ``secured`` whether authentication is on
    (known once the app has started: the schema is built on its first request).
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes, tags=app.openapi_tags, servers=app.servers)
            _complete(schema, frozenset(public()), _admin_operations(app), secured())
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _admin_operations(app: FastAPI) -> set[tuple[str, str]]:
    """(path, method) of every route that depends on the admin check."""
    contexts = getattr(routing, "iter_route_contexts", None)  # FastAPI >= 0.130 nests included routers
    found = ([(c.path, c.methods, c.original_route) for c in contexts(app.routes)] if contexts else
             [(getattr(r, "path", None), getattr(r, "methods", None), r) for r in app.routes])
    admin: set[tuple[str, str]] = set()
    for path, methods, route in found:
        if isinstance(route, APIRoute) and path and methods and _needs_admin(route):
            admin.update((path, m.lower()) for m in methods)
    return admin


def _needs_admin(route: APIRoute) -> bool:
    return any(d.call is admin_of for d in _all_dependencies(route.dependant))


def _all_dependencies(dependant: Dependant) -> list[Dependant]:
    pending, seen = list(dependant.dependencies), []
    while pending:
        current = pending.pop()
        seen.append(current)
        pending.extend(current.dependencies)
    return seen


def _complete(schema: dict[str, Any], public: Collection[str], admin: Collection[tuple[str, str]],
              secured: bool) -> None:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["ErrorBody"] = ErrorBody.model_json_schema()
    if BODY_MODELS.keys() - schemas.keys():
        schemas.update(_body_schemas(schemas))
        components["schemas"] = dict(sorted(schemas.items()))  # FastAPI's order
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's own 422 body: this API never sends it
        components["schemas"].pop(name, None)
    if secured:
        components["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            info = RouteInfo(path, method, path in public, (path, method) in admin,
                             bool(operation.get("parameters")) or "requestBody" in operation, "requestBody" in operation)
            _declare_refusals(operation, info)
            if secured:
                operation["security"] = [] if info.public else [{"bearer": []}]


def _body_schemas(known: Collection[str]) -> dict[str, Any]:
    """The components of the bodies routes read themselves (body.json_body), as FastAPI writes a body
    parameter's: pydantic's JSON Schema through FastAPI's OpenAPI model (which leaves out null members)."""
    return {name: jsonable_encoder(Schema(**model.model_json_schema(ref_template=REF_TEMPLATE)), by_alias=True,
                                   exclude_none=True)
            for name, model in BODY_MODELS.items() if name not in known}


def _declare_refusals(operation: dict[str, Any], info: RouteInfo) -> None:
    responses = operation.setdefault("responses", {})
    for refusal in COMMON_REFUSALS:
        if refusal.applies(info):
            declared = responses.setdefault(str(refusal.status), {})
            text = f"{refusal.description} (errorCode {', '.join(refusal.codes)})"
            known = declared.get("description")
            declared["description"] = f"{known} Or: {text}" if known else text
            if refusal.headers:
                declared.setdefault("headers", {}).update(refusal.headers)
    for status, response in responses.items():
        if status[0] in "45" and _is_error_body(response):
            response["content"] = {JSON: {"schema": ERROR_SCHEMA}}


def _is_error_body(response: Mapping[str, Any]) -> bool:
    """Declared with ErrorBody, FastAPI's validation error, or nothing (a common refusal)."""
    schemas = [c.get("schema", {}) for c in response.get("content", {}).values()]
    return not schemas or any(s.get("$ref", "").endswith(("/ErrorBody", "/HTTPValidationError")) for s in schemas)
