"""A failed turn: mapped to the error its caller gets, audited and logged."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa

from convengine._internal.turn_io import TurnRequest, database_detail, failure_event, map_failure
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.checkpointing.persistence import Write
from convengine.engine.resources import EngineResources
from convengine.memory import service as memory_service
from convengine.nodes.context import TurnContext

logger = logging.getLogger(__name__)


async def audit_failure(resources: EngineResources, request: TurnRequest, ctx: TurnContext, exc: BaseException,
                        deferred: Sequence[Write] = ()) -> ConvEngineError:
    """Audit a failed turn. Its checkpoint and rows rolled back with its transaction, so the
    conversation is as its previous turn left it; only this audit (and a new row) is written."""
    error = map_failure(exc)
    error.details.setdefault("conversationId", request.conversation_id)
    known = isinstance(exc, ConvEngineError) or error.code is ErrorCode.DATABASE_UNAVAILABLE
    event = ctx.audit.stamped(failure_event(request.conversation_id, error, known=known))
    event = memory_service.mask_failed(ctx, request.params, ctx.snapshot.settings.conversation_memory.secret, event)
    memory_service.publish_deferred(ctx, resources.bus)
    resources.bus.publish(event)
    try:
        await resources.store.write_failure(request.conversation_id, [*ctx.audit.events, event], ctx.owner,
                                            all_writes(memory_service.failure_writes(request), *deferred))
    except Exception as write_error:  # noqa: BLE001 - the original failure is what the caller needs
        logger.warning("could not store the audit of a failed turn of %s: %s", request.conversation_id,
                       database_detail(write_error))
    if not known:
        logger.exception("turn of %s failed", request.conversation_id, exc_info=exc)
    elif error.code is ErrorCode.DATABASE_UNAVAILABLE:
        logger.warning("turn of %s failed: %s (%s)", request.conversation_id, error.message, database_detail(exc))
    return error


def all_writes(*writes: Write | None) -> Write:
    """The writes given (memory rows, the version pin when the turn moves it, the deferred LLM call
    log), in order, in one transaction."""
    chosen = [w for w in writes if w is not None]

    def write(conn: sa.Connection) -> None:
        for each in chosen:
            each(conn)

    return write
