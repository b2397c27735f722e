"""Direct tool calls from the ``tool_request`` input param (interim)."""

from __future__ import annotations

from convengine.nodes.turn import Turn


async def run_tool_request(turn: Turn) -> None:
    turn.audit("TOOL_ORCHESTRATION_SKIPPED", {"reason": "NOT_AVAILABLE"})
