"""The HTTP side of admission (:mod:`convengine.engine.admission`): a turn refused because the process
runs as many turns as its pool serves and its queue is full is answered ``503`` with ``Retry-After``
and ``SERVER_BUSY``, not with ConvEngine's ``200`` error reply: nothing of it ran, and a client or a
load balancer should retry it (elsewhere, or later).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from convengine.api.refusals import error_response
from convengine.catalog.errors import (
    ConvEngineError,
    ConversationNotFoundError,
    InvalidInputError,
    ServerBusyError,
)

ANSWERED_BY_STATUS: tuple[type[ConvEngineError], ...] = (InvalidInputError, ConversationNotFoundError, ServerBusyError)
"""Errors a turn endpoint answers with an HTTP status (4xx, 503) instead of ConvEngine's 200 error reply."""

BUSY_STATUS = 503


def busy_response(exc: ServerBusyError) -> JSONResponse:
    """``503 SERVER_BUSY`` with ``Retry-After``."""
    return error_response(BUSY_STATUS, exc.code, exc.message, headers={"Retry-After": str(exc.retry_after_s)})
