"""JSON request bodies parsed with a depth bound: a body nesting deeper than inputParams may is refused
with 422 before it can exhaust the parser's recursion (``[[[[...`` 100,000 deep) or the validators'.

Every key and string of a body, and every query parameter, must also be storable text (no NUL,
no lone surrogate: :mod:`convengine._internal.storable`): one 422 naming the field, on every route and both
backends, before any handler or database sees it.

A route on the hot path (``POST /api/v1/conversation/message``) takes the Request and reads its body
with :func:`read_body` instead of declaring a body parameter: the same checks, in the same order, with
the same errors as FastAPI's reading of a single JSON body parameter, without FastAPI's per-request
dependency solving. :func:`json_body` declares that body in the OpenAPI document as FastAPI would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from convengine._internal.storable import text_problem, unstorable
from convengine._internal.turn_io import nesting_depth
from convengine.settings import DEFAULT_MAX_INPUT_DEPTH


def parse_json(body: bytes, max_depth: int) -> Any:
    """``json.loads`` of a body that nests at most ``max_depth`` levels; HTTPException 422 otherwise."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise _too_deep(max_depth) from None
    if nesting_depth(value, max_depth + 1) > max_depth:
        raise _too_deep(max_depth)
    problem = unstorable(value, "body")
    if problem is not None:
        raise HTTPException(422, f"invalid request: {problem}")
    return value


def _too_deep(max_depth: int) -> HTTPException:
    return HTTPException(422, f"invalid request: the body nests deeper than {max_depth} levels (inputParams may "
                              f"nest {max_depth - 1}: settings.api.max_input_depth)")


Model = TypeVar("Model", bound=BaseModel)
UNREADABLE_BODY = "There was an error parsing the body"
"""FastAPI's 400 for a body it cannot read or decode (the app answers it as a 422: see app.py)."""
BODY_MODELS: dict[str, type[BaseModel]] = {}
"""The models declared by :func:`json_body`: the OpenAPI document's components include them (contract.py)."""


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the route's required JSON body, as FastAPI declares a body parameter."""
    BODY_MODELS[model.__name__] = model
    return {"requestBody": {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
                            "required": True}}


async def read_body(request: Request, model: type[Model]) -> Model:
    """The request's body as ``model``, read as FastAPI reads a route's only (not embedded) body parameter.

    A JSON content type (``application/json``, ``application/*+json``) and a non-empty body: parsed with
    :func:`parse_json` (depth bound, storable text), then validated; any other body is validated as the
    bytes it is (and refused), an empty one is missing.

    Raises:
        RequestValidationError: invalid JSON (``json_invalid`` at its position), a missing body, or one
            the model refuses (locations under ``body``), as FastAPI raises it: the app answers 422.
        HTTPException: 422 from :func:`parse_json`, 413 from the body limit, 400 for a body that cannot
            be read or decoded.
    """
    try:
        raw = await request.body()
        value: Any = raw
        if raw and _declares_json(request.headers.get("content-type")):
            value = parse_json(raw, _body_depth(request))
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from exc
    except HTTPException:
        raise
    except Exception as exc:  # a body that is not UTF-8, a client gone while sending it
        raise HTTPException(400, UNREADABLE_BODY) from exc
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise RequestValidationError(errors, body=value) from None


def _declares_json(content_type: str | None) -> bool:
    """FastAPI's test of a body's content type (``email.message``'s reading of the header)."""
    if not content_type:
        return False
    media = content_type.partition(";")[0].strip().lower()
    if media.count("/") != 1:
        return False
    kind, subtype = media.split("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


class DepthCheckedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body(), _body_depth(self))
        return self._json


def _body_depth(request: Request) -> int:
    engine = getattr(request.app.state, "engine", None)
    depth = engine.settings.api.max_input_depth if engine is not None else DEFAULT_MAX_INPUT_DEPTH
    return int(depth) + 1  # the body object itself is one level


class DepthCheckedRoute(APIRoute):
    """An APIRoute whose handler parses JSON bodies with :func:`parse_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            _check_parameters(request)
            return await handler(DepthCheckedRequest(request.scope, request.receive))

        return checked


class RequestRoute(DepthCheckedRoute):
    """A route whose endpoint takes the Request alone and returns a Response: called directly, without
    FastAPI's per-request solving of parameters it does not have."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant = self.dependant
        if dependant.dependencies or dependant.body_params or dependant.path_params or dependant.query_params \
                or dependant.header_params or dependant.cookie_params or dependant.request_param_name is None:
            raise TypeError(f"{self.path}: a RequestRoute's endpoint takes the Request and nothing else")
        endpoint = self.endpoint

        async def called(request: Request) -> Response:
            _check_parameters(request)
            response: Response = await endpoint(DepthCheckedRequest(request.scope, request.receive))
            return response

        return called


def _check_parameters(request: Request) -> None:
    """422 for a query parameter that is not storable text (``?q=%00``). Path parameters are checked by
    their routes (conversation ids are UUIDs, versions numbers, channel names and asset names are checked)."""
    for key, value in request.query_params.multi_items():
        name = "query parameter " + key
        problem = text_problem(value) or text_problem(name)
        if problem is not None:
            shown = "".join(ch if ch.isprintable() else "?" for ch in name[:60])
            raise HTTPException(422, f"invalid request: {shown} {problem}")
