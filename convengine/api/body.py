"""JSON request bodies parsed with a depth bound: a body nesting deeper than inputParams may is refused
with 422 before it can exhaust the parser's recursion (``[[[[...`` 100,000 deep) or the validators'."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from convengine.engine_io import nesting_depth
from convengine.settings import DEFAULT_MAX_INPUT_DEPTH


def parse_json(body: bytes, max_depth: int) -> Any:
    """``json.loads`` of a body that nests at most ``max_depth`` levels; HTTPException 422 otherwise."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise _too_deep(max_depth) from None
    if nesting_depth(value, max_depth + 1) > max_depth:
        raise _too_deep(max_depth)
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
            return await handler(DepthCheckedRequest(request.scope, request.receive))

        return checked
