"""The MCP planner loop (interim: pass-through until the tools work lands)."""

from __future__ import annotations

from typing import Any

from convengine.nodes.common import in_scope
from convengine.nodes.turn import Turn
from convengine.vocab import PRE_AGENT_MCP


def tools_in_scope(turn: Turn) -> list[Any]:
    return [t for t in turn.snapshot.tools if t.enabled and in_scope(t.intent_code, t.state_code, turn.intent, turn.state)]


def planner_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    if turn.snapshot.rules_for(PRE_AGENT_MCP) or tools_in_scope(turn):
        return None
    return "MCP_NO_TOOLS_AVAILABLE", {"intent": turn.intent, "state": turn.state, "reason": "NO_TOOLS_FOR_SCOPE"}


async def plan_step(turn: Turn) -> None:
    turn.audit("MCP_NO_TOOLS_AVAILABLE", {"intent": turn.intent, "state": turn.state})


async def call_step(turn: Turn) -> None:
    return None
