"""The API's refusals (4xx) in ConvEngine's error shape, from routes and from middleware alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from convengine.api.schemas import ErrorBody
from convengine.catalog.errors import ErrorCode


def error_response(status: int, code: ErrorCode | str, message: str, *, details: list[dict[str, Any]] | None = None,
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """``ErrorBody`` as JSON with the given status."""
    value = code.value if isinstance(code, ErrorCode) else code
    body = ErrorBody(errorCode=value, message=message, details=details or [])
    return JSONResponse(status_code=status, content=body.model_dump(), headers=dict(headers or {}))


class ApiRefusal(Exception):
    """A request the API refuses: raised in routes (an exception handler answers), sent by middleware."""

    def __init__(self, status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, headers=self.headers)
