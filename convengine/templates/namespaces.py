"""The memory namespaces every template sees (responses, prompts, HTTP tool requests), besides the
engine's own variables: ``properties``, ``memory.current`` / ``.last`` / ``.past``, ``userInfo``,
``conversationInfo`` and ``conversationLog`` (``context`` is the engine's already).

Each is produced lazily, only when a template refers to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from convengine.catalog import state as keys
from convengine.catalog.memory import ACTION_STAGE
from convengine.turn_view import TurnView


class NamespaceSession(TurnView, Protocol):
    """The slice of a turn the memory namespaces read (a part of ``TemplateSession``): the turn view,
    the run context, the user's text and the state's values."""

    ctx: Any
    """The run context: its audit events and the turn's user."""

    @property
    def user_text(self) -> str: ...

    def get(self, key: str, default: object = None) -> Any: ...


NAMESPACES: tuple[str, ...] = ("properties", "memory", "userInfo", "conversationInfo", "conversationLog")
"""The names :func:`producers` gives every template (the load-time checks know them as the engine's)."""


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def properties(turn: NamespaceSession) -> dict[str, Any]:
    """The conversation's properties: persisted params, then its context (which holds the long-term
    properties loaded when it started), by name."""
    return {**dict(turn.get(keys.INPUT_PARAMS) or {}), **dict(turn.read_context())}


def _past(turn: NamespaceSession) -> list[dict[str, Any]]:
    return [{"input": t.get("user"), "output": t.get("assistant")} for t in turn.get(keys.RECENT_TURNS) or []]


def memory(turn: NamespaceSession) -> dict[str, Any]:
    payload = turn.get(keys.PAYLOAD) or {}
    actions = [{"ruleId": p.get("ruleId"), "action": p.get("action")}
               for stage, _, p in turn.ctx.audit.events.entries() if stage == ACTION_STAGE]
    past = _past(turn)
    kept = turn.read_context().get("memory")  # the session summary lives there: {{memory.session_summary}}
    current = {"input": turn.user_text, "output": payload.get("value"), "actions": actions,
               "intent": turn.intent, "state": turn.state, "step": turn.get(keys.TURN)}
    return {**(kept if isinstance(kept, dict) else {}), "current": current, "last": past[-1] if past else {},
            "past": past}


def conversation_log(turn: NamespaceSession) -> str:
    lines = []
    for entry in _past(turn):
        lines.append(f"user: {entry['input']}")
        if entry["output"] is not None:
            lines.append(f"assistant: {_text(entry['output'])}")
    return "\n".join(lines)


def _conversation_info(turn: NamespaceSession) -> dict[str, Any]:
    return {"conversationId": turn.conversation_id, "intent": turn.intent, "state": turn.state,
            "turn": turn.get(keys.TURN), "status": turn.get(keys.STATUS)}


PRODUCERS: dict[str, Callable[[NamespaceSession], Any]] = {
    "properties": properties,
    "memory": memory,
    "userInfo": lambda turn: {"userId": turn.ctx.user_id},
    "conversationInfo": _conversation_info,
    "conversationLog": conversation_log,
}
"""What each of :data:`NAMESPACES` is for a turn, computed when a template or rule refers to it."""
