"""tool_orchestration, mcp_planner and mcp_tool_call (the planner loop as graph edges)."""

from __future__ import annotations

from typing import Any

from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.nodes.common import Step
from convengine.nodes.planner import call_step, plan_step, planner_skip
from convengine.nodes.tool_request import run_tool_request
from convengine.nodes.turn import Turn


async def tool_orchestration(turn: Turn) -> None:
    await run_tool_request(turn)


def _tool_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    params = turn.read_params()
    if not params.get(pk.TOOL_REQUEST) or not turn.settings.flow.tool_orchestration.enabled:
        return stages.TOOL_ORCHESTRATION_SKIPPED, {"reason": "NO_TOOL_REQUEST"}
    if params.get(pk.SKIP_TOOL_EXECUTION) or params.get(pk.GUARDRAIL_BLOCKED):
        return stages.TOOL_ORCHESTRATION_SKIPPED, {"reason": "BLOCKED_BY_GUARDRAIL"}  # a denied turn runs no tool
    return None


async def mcp_planner(turn: Turn) -> None:
    await plan_step(turn)


async def mcp_tool_call(turn: Turn) -> None:
    await call_step(turn)


def _planner_skip(turn: Turn) -> tuple[str, dict[str, Any]] | None:
    return planner_skip(turn)


STEPS = (
    Step(names.TOOL_ORCHESTRATION, tool_orchestration, skip=_tool_skip),
    Step(names.MCP_PLANNER, mcp_planner, skip=_planner_skip, routes=(names.MCP_TOOL_CALL,)),
    Step(names.MCP_TOOL_CALL, mcp_tool_call, loop_only=True, routes=(names.MCP_PLANNER,)),
)
