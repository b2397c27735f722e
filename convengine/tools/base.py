"""What tool executors share: the call context, result normalisation, errors."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from convengine.catalog.errors import ErrorCode, ToolError
from convengine.config.records import ToolRecord
from convengine.config.snapshot import ConfigSnapshot
from convengine.turn_view import TurnView


class ToolSession(TurnView, Protocol):
    """The slice of a turn that tool executors see (implemented by the nodes' Turn)."""

    @property
    def snapshot(self) -> ConfigSnapshot: ...

    @property
    def user_text(self) -> str: ...


class AdapterNotConfiguredError(ToolError):
    default_code = ErrorCode.TOOL_ADAPTER_NOT_CONFIGURED


class ToolNotFoundError(ToolError):
    default_code = ErrorCode.TOOL_NOT_FOUND


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool handler or adapter receives besides its arguments."""

    tool: ToolRecord
    conversation_id: str
    intent: str
    state: str
    user_text: str
    params: Mapping[str, Any] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, turn: ToolSession, tool: ToolRecord) -> ToolContext:
        return cls(tool, turn.conversation_id, turn.intent, turn.state, turn.user_text, dict(turn.read_params()),
                   dict(turn.read_context()))


Handler = Callable[..., Any]


async def call_handler(handler: Handler, args: dict[str, Any], ctx: ToolContext) -> Any:
    """Call ``handler(args, ctx)`` (or ``handler(args)``), awaiting it when async."""
    try:
        count = len([p for p in inspect.signature(handler).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        count = 2
    outcome = handler(args, ctx) if count >= 2 else handler(args)
    if inspect.isawaitable(outcome):
        outcome = await outcome
    return outcome


def normalise_result(value: object) -> Any:
    """ConvEngine's normalisation: null/blank -> {}; JSON text parsed; other text -> {"text": ...}."""
    if value is None:
        return {}
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            return json.loads(text)
        except ValueError:
            return {"text": value}
    return json.loads(json.dumps(value, default=str))


def tool_meta(tool: ToolRecord) -> dict[str, Any]:
    """The ``_meta`` block of direct tool results."""
    return {"tool_id": tool.tool_id, "tool_code": tool.tool_code, "tool_group": tool.group,
            "intent_code": tool.intent_code, "state_code": tool.state_code, "enabled": tool.enabled,
            "description": tool.description,
            "created_at": tool.created_at.isoformat() if tool.created_at else None}


GROUP_ADAPTER_NAMES = {
    "DB": "DbToolHandler",
    "HTTP_API": "HttpApiToolHandler or HttpApiExecutorAdapter",
    "WORKFLOW_ACTION": "WorkflowActionExecutorAdapter",
    "DOCUMENT_RETRIEVAL": "DocumentRetrievalExecutorAdapter",
    "CALCULATOR_TRANSFORM": "CalculatorTransformExecutorAdapter",
    "NOTIFICATION": "NotificationExecutorAdapter",
    "FILES": "FileExecutorAdapter",
    "MCP_SERVER": "MCP server",
}
