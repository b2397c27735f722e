"""tool_orchestration: run the tool a caller asked for in ``tool_request``."""

from __future__ import annotations

import json
from typing import Any

from convengine.catalog import params as pk
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError
from convengine.catalog.vocab import POST_TOOL_EXECUTION, canonical_tool_group
from convengine.config.records import ToolRecord
from convengine.nodes.common import run_rules
from convengine.nodes.turn import Turn
from convengine.tools.base import tool_meta
from convengine.tools.runner import ToolRunner


class ToolRequestError(ValueError):
    pass


def parse_request(raw: object) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ToolRequestError("tool_request is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ToolRequestError("tool_request must be an object {tool_code?, tool_group?, args}")
    args = raw.get("args", {})
    if not isinstance(args, dict):
        raise ToolRequestError("tool_request.args must be an object")
    return {"tool_code": str(raw.get("tool_code") or "").strip(), "tool_group": raw.get("tool_group"), "args": args}


def _resolve(turn: Turn, request: dict[str, Any]) -> ToolRecord:
    """The granted tool a caller's request names: an enabled ce_mcp_tool row (or a configured MCP
    server's tool) by code, or the one such row of the requested group in scope. Nothing else runs."""
    runner = turn.ctx.services.tools
    assert runner is not None
    code = request["tool_code"]
    group = canonical_tool_group(request["tool_group"]) if request["tool_group"] else None
    if not code:
        return _only_tool_of_group(turn, group)
    tool = runner.find(turn, code)
    if tool is None:
        raise ToolRequestError(f"no enabled tool {code!r}: a tool_request may only name a tool the configuration "
                               "defines (ce_mcp_tool)")
    if group and group != tool.group:
        raise ToolRequestError(f"tool {code!r} is in group {tool.group}, not {group}")
    return tool


def _only_tool_of_group(turn: Turn, group: str | None) -> ToolRecord:
    if group is None:
        raise ToolRequestError("tool_request needs a tool_code, or a tool_group with exactly one enabled tool in scope")
    tools = [t for t in turn.snapshot.tools if t.enabled and t.group == group and ToolRunner.in_scope(turn, t)]
    if len(tools) != 1:
        found = ", ".join(t.tool_code for t in tools) or "none"
        raise ToolRequestError(f"tool_group {group} without a tool_code needs exactly one enabled {group} tool for "
                               f"{turn.intent}/{turn.state}; found {found}")
    return tools[0]


async def run_tool_request(turn: Turn) -> None:
    raw = turn.read_params().get(pk.TOOL_REQUEST)
    try:
        request = parse_request(raw)
    except ToolRequestError as exc:
        _error(turn, None, {"tool_code": None, "tool_group": None}, str(exc))
        return
    turn.audit(stages.TOOL_ORCHESTRATION_REQUEST, request)
    try:
        tool = _resolve(turn, request)
    except ToolRequestError as exc:
        _error(turn, None, request, str(exc))
        return
    if not ToolRunner.in_scope(turn, tool):
        _scope_mismatch(turn, tool)
        return
    runner = turn.ctx.services.tools
    assert runner is not None  # _resolve found the tool through it
    try:
        result = await runner.execute(turn, tool, request["args"])
    except (ConvEngineError, Exception) as exc:  # noqa: BLE001 - tool failures become the ERROR shape
        _error(turn, tool, request, getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
        return
    await _success(turn, tool, result)


def _execution(status: str, outcome: str, tool: ToolRecord | None, **extra: object) -> dict[str, Any]:
    return {"phase": POST_TOOL_EXECUTION, "finished": True, "status": status, "outcome": outcome,
            "error": status == "ERROR", "scopeMismatch": status == "SKIPPED_SCOPE_MISMATCH",
            "toolExecuted": status == "SUCCESS", "toolCode": tool.tool_code if tool else None,
            "toolGroup": tool.group if tool else None, **extra}


async def _success(turn: Turn, tool: ToolRecord, result: object) -> None:
    shaped = {"status": "SUCCESS", "tool_code": tool.tool_code, "tool_group": tool.group, "result": result,
              "_meta": tool_meta(tool)}
    turn.params.update(tool_result=shaped, tool_status="SUCCESS")
    turn.context.setdefault("mcp", {})["toolExecution"] = _execution("SUCCESS", "SUCCESS", tool, result=result,
                                                                     meta=tool_meta(tool))
    turn.audit(stages.TOOL_ORCHESTRATION_RESULT, _audited(shaped))
    await run_rules(turn, POST_TOOL_EXECUTION, "ToolOrchestrationStep PostTool")


def _scope_mismatch(turn: Turn, tool: ToolRecord) -> None:
    shaped = {"status": "SKIPPED_SCOPE_MISMATCH", "tool_code": tool.tool_code, "tool_group": tool.group,
              "intent": turn.intent, "state": turn.state, "_meta": tool_meta(tool)}
    turn.params.update(tool_result=shaped, tool_status="SKIPPED_SCOPE_MISMATCH")
    turn.context.setdefault("mcp", {})["toolExecution"] = _execution("SKIPPED_SCOPE_MISMATCH", "SCOPE_MISMATCH", tool)
    turn.audit(stages.TOOL_ORCHESTRATION_RESULT, _audited(shaped))


def _error(turn: Turn, tool: ToolRecord | None, request: dict[str, Any], message: str) -> None:
    shaped: dict[str, Any] = {"status": "ERROR", "tool_code": tool.tool_code if tool else request.get("tool_code"),
                              "tool_group": tool.group if tool else request.get("tool_group"), "error": message}
    if tool is not None:
        shaped["_meta"] = tool_meta(tool)
    turn.params.update(tool_result=shaped, tool_status="ERROR")
    turn.context.setdefault("mcp", {})["toolExecution"] = _execution("ERROR", "ERROR", tool, errorMessage=message)
    turn.audit(stages.TOOL_ORCHESTRATION_ERROR, _audited(shaped))


def _audited(shaped: dict[str, Any]) -> dict[str, Any]:
    """The audit copy: the tool's ``_meta`` moves to ``toolMeta`` (``_meta`` is the audit's own)."""
    out = {k: v for k, v in shaped.items() if k != "_meta"}
    if "_meta" in shaped:
        out["toolMeta"] = shaped["_meta"]
    return out
