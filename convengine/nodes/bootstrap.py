"""Turn start: load_or_create_conversation, reset_conversation, persist_conversation_bootstrap,
audit_user_input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.booleans import truthy
from convengine.catalog.state import RESET_PARAM_KEYS, caller_params, persistent_params, turn_defaults
from convengine.catalog.vocab import UNKNOWN
from convengine.nodes import adoption
from convengine.nodes.adoption import Adopted
from convengine.nodes.common import Step
from convengine.nodes.recorded import input_params, remember_context
from convengine.nodes.schema_scope import adopt_schema
from convengine.nodes.turn import Turn

RESET_COMMANDS = frozenset({"reset", "restart", "/reset", "/restart", "start over", "/start-over"})


async def load_or_create_conversation(turn: Turn) -> None:
    """Clear turn-scoped keys, create the conversation on its first turn, merge params."""
    request = turn.get(keys.TURN_INPUT) or {}
    is_new = turn.get(keys.TURN) is None
    remember_context(turn)
    for key, value in turn_defaults().items():
        if turn.get(key) != value:  # unchanged keys keep their version: nothing to checkpoint
            turn.set(key, value)
    if is_new:
        turn.set(keys.NEW_CONVERSATION, True)
    adopted = await _adoptable(turn) if is_new else None
    if adopted is not None:
        _adopt(turn, adopted)
    elif is_new:
        _create(turn)
    elif turn.get(keys.STATUS) != "RUNNING":
        turn.set(keys.STATUS, "RUNNING")  # a BLOCKED conversation runs again on its next turn
    persisted = persistent_params(turn.get(keys.INPUT_PARAMS) or {}, turn.get(keys.INPUT_PARAMS) or {})
    turn.set(keys.PARAMS, {**persisted, **accepted_params(turn, request.get("params") or {})})
    turn.set(keys.USER_TEXT, str(request.get("text") or ""))
    turn.set(keys.TURN, int(turn.get(keys.TURN) or 0) + 1)
    turn.set(keys.TURN_START, {"intent": turn.intent, "state": turn.state, "turn": turn.get(keys.TURN)})


def accepted_params(turn: Turn, params: Mapping[str, Any]) -> dict[str, Any]:
    """The request's params a caller may set: engine-computed keys (and, when the settings say so, a
    ``tool_request``) are dropped, and the drop is audited."""
    accepted, dropped = caller_params(params)
    if dropped:
        turn.audit(stages.INPUT_PARAMS_REJECTED, {"keys": dropped, "reason": "ENGINE_COMPUTED"})
    if "tool_request" in accepted and not turn.settings.flow.tool_orchestration.allow_caller_requests:
        accepted.pop("tool_request")
        turn.audit(stages.INPUT_PARAMS_REJECTED, {"keys": ["tool_request"], "reason": "CALLER_TOOL_REQUESTS_DISABLED"})
    return accepted


def _create(turn: Turn) -> None:
    turn.set(keys.CONVERSATION_ID, turn.conversation_id)
    turn.set(keys.STATUS, "RUNNING")
    turn.set(keys.INTENT, UNKNOWN)
    turn.set(keys.STATE, UNKNOWN)
    turn.set(keys.CONTEXT, dict(turn.get(keys.CONTEXT) or {}))  # kept when the conversation was seeded
    turn.set(keys.INPUT_PARAMS, dict(turn.get(keys.INPUT_PARAMS) or {}))
    turn.set(keys.RECENT_TURNS, [])


async def _adoptable(turn: Turn) -> Adopted | None:
    """A row without a checkpoint (ConvEngine's, or Studio's) to continue, if there is one."""
    store = turn.ctx.services.store
    if store is None or turn.ctx.has_row is False:  # the turn's admission read found no row under its lock
        return None
    return await adoption.find(store.engine, turn.conversation_id,
                               recent=turn.settings.flow.conversation_history.max_turns,
                               max_depth=turn.settings.api.max_input_depth)


def _adopt(turn: Turn, adopted: Adopted) -> None:
    turn.set(keys.NEW_CONVERSATION, False)
    turn.set(keys.CONVERSATION_ID, turn.conversation_id)
    turn.set(keys.STATUS, "RUNNING")
    turn.set(keys.INTENT, adopted.intent)
    turn.set(keys.STATE, adopted.state)
    turn.set(keys.CONTEXT, adopted.context)
    turn.set(keys.INPUT_PARAMS, adopted.input_params)
    turn.set(keys.RECENT_TURNS, adopted.recent_turns)
    turn.set(keys.TURN, adopted.turns)
    if adopted.schema_id is not None:
        adopt_schema(turn, adopted.schema_id)
    turn.audit(stages.CONVERSATION_ADOPTED, adopted.audit_payload())


def reset_reason(turn: Turn) -> str | None:
    """Why this turn resets the conversation, or None."""
    request = turn.get(keys.TURN_INPUT) or {}
    if truthy(request.get("reset")):
        return "INPUT_PARAM:reset"
    request_params = request.get("params") or {}
    for key in RESET_PARAM_KEYS:
        if truthy(request_params.get(key)):
            return f"INPUT_PARAM:{key}"
    if turn.user_text.strip().lower() in RESET_COMMANDS:
        return "USER_TEXT_COMMAND"
    return None


def wipe(turn: Turn, reason: str, *, extra: dict[str, Any] | None = None) -> None:
    """ConvEngine's full reset: intent/state UNKNOWN, context {}, params re-seeded from the request."""
    before = {"intent": turn.intent, "state": turn.state, "context": dict(turn.read_context())}
    request_params = dict((turn.get(keys.TURN_INPUT) or {}).get("params") or {})
    for key in RESET_PARAM_KEYS:
        request_params.pop(key, None)
    turn.set(keys.INTENT, UNKNOWN)
    turn.set(keys.STATE, UNKNOWN)
    turn.replace_context({})
    turn.set(keys.PARAMS, request_params)
    turn.set(keys.INPUT_PARAMS, {})
    turn.set(keys.STATUS, "RUNNING")
    turn.set(keys.RECENT_TURNS, [])
    turn.set(keys.SCHEMA_FACTS, {})
    turn.set(keys.SCHEMA_SCOPE, None)
    turn.set(keys.TRANSITIONS, [])
    turn.set(keys.TURN_START, {"intent": UNKNOWN, "state": UNKNOWN, "turn": turn.get(keys.TURN)})
    turn.params[pk.RESET_REASON] = reason
    turn.audit(stages.CONVERSATION_RESET, {"reason": reason, **before, **(extra or {})})


async def reset_conversation(turn: Turn) -> None:
    reason = reset_reason(turn)
    if reason:
        wipe(turn, reason)


async def persist_conversation_bootstrap(turn: Turn) -> None:
    """ConvEngine inserted a new conversation's row here. convengine writes it with the turn's
    commit (the projection upsert, owned by the caller), so a first turn that does not complete
    leaves no RUNNING row behind; outside the engine's runtime (Studio) the row is written now."""
    store = turn.ctx.services.store
    if turn.get(keys.NEW_CONVERSATION) and store is not None and turn.ctx.autocommit:
        await store.ensure_conversation(turn.conversation_id, user_text=turn.user_text, owner=turn.ctx.owner)


async def audit_user_input(turn: Turn) -> None:
    """What the caller sent: the text, its params and, for an event turn (welcome, handoff_resume), the
    event (so a recorded conversation can be sent again as it was)."""
    event = (turn.get(keys.TURN_INPUT) or {}).get("event")
    turn.audit(stages.USER_INPUT, {"text": turn.user_text, **({"event": event} if event else {}), **input_params(turn)})


def _reset_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if reset_reason(turn) else (None, {"reason": "NO_RESET_TRIGGER"})


def _bootstrap_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if turn.get(keys.NEW_CONVERSATION) else (None, {"reason": "CONVERSATION_EXISTS"})


STEPS = (
    Step(names.LOAD_OR_CREATE_CONVERSATION, load_or_create_conversation),
    Step(names.RESET_CONVERSATION, reset_conversation, skip=_reset_skip),
    Step(names.PERSIST_CONVERSATION_BOOTSTRAP, persist_conversation_bootstrap, skip=_bootstrap_skip),
    Step(names.AUDIT_USER_INPUT, audit_user_input),
)
