"""JSON request bodies parsed with a depth bound: a body nesting deeper than inputParams may is refused
with 422 before it can exhaust the parser's recursion (``[[[[...`` 100,000 deep) or the validators'.

Every key and string of a body, and every query parameter, must also be storable text (no NUL,
no lone surrogate: :mod:`convengine._internal.storable`): one 422 naming the field, on every route and both
backends, before any handler or database sees it."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
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


def _check_parameters(request: Request) -> None:
    """422 for a query parameter that is not storable text (``?q=%00``). Path parameters are checked by
    their routes (conversation ids are UUIDs, versions numbers, channel names and asset names are checked)."""
    for key, value in request.query_params.multi_items():
        name = "query parameter " + key
        problem = text_problem(value) or text_problem(name)
        if problem is not None:
            shown = "".join(ch if ch.isprintable() else "?" for ch in name[:60])
            raise HTTPException(422, f"invalid request: {shown} {problem}")
