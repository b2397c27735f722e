"""Turn start: load_or_create_conversation, reset_conversation, persist_conversation_bootstrap,
audit_user_input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from convengine import adoption
from convengine.adoption import Adopted
from convengine.audit import stages
from convengine.booleans import truthy
from convengine.graph import names
from convengine.nodes.common import Step
from convengine.nodes.schema_scope import adopt_schema
from convengine.nodes.turn import Turn
from convengine.state import RESET_PARAM_KEYS, caller_params, persistent_params, turn_defaults
from convengine.vocab import UNKNOWN

RESET_COMMANDS = frozenset({"reset", "restart", "/reset", "/restart", "start over", "/start-over"})


async def load_or_create_conversation(turn: Turn) -> None:
    """Clear turn-scoped keys, create the conversation on its first turn, merge params."""
    request = turn.get("turn_input") or {}
    is_new = turn.get("turn") is None
    turn.ctx.is_new = is_new
    for key, value in turn_defaults().items():
        if turn.get(key) != value:  # unchanged keys keep their version: nothing to checkpoint
            turn.set(key, value)
    adopted = await _adoptable(turn) if is_new else None
    if adopted is not None:
        _adopt(turn, adopted)
    elif is_new:
        _create(turn)
    elif turn.get("status") != "RUNNING":
        turn.set("status", "RUNNING")  # a BLOCKED conversation runs again on its next turn
    persisted = persistent_params(turn.get("input_params") or {}, turn.get("input_params") or {})
    turn.set("params", {**persisted, **accepted_params(turn, request.get("params") or {})})
    turn.set("user_text", str(request.get("text") or ""))
    turn.set("turn", int(turn.get("turn") or 0) + 1)
    turn.set("turn_start", {"intent": turn.intent, "state": turn.state, "turn": turn.get("turn")})


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
    turn.set("conversation_id", turn.conversation_id)
    turn.set("status", "RUNNING")
    turn.set("intent", UNKNOWN)
    turn.set("state", UNKNOWN)
    turn.set("context", dict(turn.get("context") or {}))  # kept when the conversation was seeded
    turn.set("input_params", dict(turn.get("input_params") or {}))
    turn.set("recent_turns", [])


async def _adoptable(turn: Turn) -> Adopted | None:
    """A row without a checkpoint (ConvEngine's, or Studio's) to continue, if there is one."""
    store = turn.ctx.services.store
    if store is None:
        return None
    return await adoption.find(store.engine, turn.conversation_id,
                               recent=turn.settings.flow.conversation_history.max_turns,
                               max_depth=turn.settings.api.max_input_depth)


def _adopt(turn: Turn, adopted: Adopted) -> None:
    turn.ctx.is_new = False
    turn.set("conversation_id", turn.conversation_id)
    turn.set("status", "RUNNING")
    turn.set("intent", adopted.intent)
    turn.set("state", adopted.state)
    turn.set("context", adopted.context)
    turn.set("input_params", adopted.input_params)
    turn.set("recent_turns", adopted.recent_turns)
    turn.set("turn", adopted.turns)
    if adopted.schema_id is not None:
        adopt_schema(turn, adopted.schema_id)
    turn.audit(stages.CONVERSATION_ADOPTED, adopted.audit_payload())


def reset_reason(turn: Turn) -> str | None:
    """Why this turn resets the conversation (reference §8.7), or None."""
    request = turn.get("turn_input") or {}
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
    request_params = dict((turn.get("turn_input") or {}).get("params") or {})
    for key in RESET_PARAM_KEYS:
        request_params.pop(key, None)
    turn.set("intent", UNKNOWN)
    turn.set("state", UNKNOWN)
    turn.replace_context({})
    turn.set("params", request_params)
    turn.set("input_params", {})
    turn.set("status", "RUNNING")
    turn.set("recent_turns", [])
    turn.set("schema_facts", {})
    turn.set("schema_scope", None)
    turn.set("transitions", [])
    turn.set("turn_start", {"intent": UNKNOWN, "state": UNKNOWN, "turn": turn.get("turn")})
    turn.params["reset_reason"] = reason
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
    if turn.ctx.is_new and store is not None and turn.ctx.autocommit:
        await store.ensure_conversation(turn.conversation_id, user_text=turn.user_text, owner=turn.ctx.owner)


async def audit_user_input(turn: Turn) -> None:
    turn.audit(stages.USER_INPUT, {"text": turn.user_text})


def _reset_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if reset_reason(turn) else (None, {"reason": "NO_RESET_TRIGGER"})


def _bootstrap_skip(turn: Turn) -> tuple[str | None, dict[str, Any]] | None:
    return None if turn.ctx.is_new else (None, {"reason": "CONVERSATION_EXISTS"})


STEPS = (
    Step(names.LOAD_OR_CREATE_CONVERSATION, load_or_create_conversation),
    Step(names.RESET_CONVERSATION, reset_conversation, skip=_reset_skip),
    Step(names.PERSIST_CONVERSATION_BOOTSTRAP, persist_conversation_bootstrap, skip=_bootstrap_skip),
    Step(names.AUDIT_USER_INPUT, audit_user_input),
)
