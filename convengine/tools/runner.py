"""ToolRunner: find a tool in scope and run it with the executor of its group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from convengine._internal.jsontext import dumps
from convengine._internal.working import waiting_outside
from convengine.catalog.errors import ErrorCode, ToolError
from convengine.config.records import ToolRecord
from convengine.registry import Registries
from convengine.rules.scope import in_scope
from convengine.tools.base import (
    GROUP_ADAPTER_NAMES,
    AdapterNotConfiguredError,
    Handler,
    ToolContext,
    ToolSession,
    call_handler,
    normalise_result,
)
from convengine.tools.db import RAW_SQL_TOOLS, DbRunner
from convengine.tools.http import HttpRequest, HttpRunner
from convengine.tools.mcp_servers import McpServers, split_code

T = TypeVar("T")


@dataclass
class ToolRunner:
    registries: Registries
    db: DbRunner
    http: HttpRunner
    mcp: McpServers

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.mcp.aclose()
        self.db.close()

    # --- lookup -----------------------------------------------------------------------

    def find(self, turn: ToolSession, tool_code: str) -> ToolRecord | None:
        """The enabled ce_mcp_tool row (or configured MCP-server tool) for a code, in or out of scope."""
        row = turn.snapshot.tool(tool_code)
        if row is not None:
            return row if row.enabled else None
        parts = split_code(tool_code)
        if parts and parts[0] in self.mcp.settings:
            server = self.mcp.settings[parts[0]]
            return ToolRecord(tool_id=0, tool_code=tool_code, tool_group="MCP_SERVER", intent_code=server.intent_code,
                              state_code=server.state_code, description=f"tool {parts[1]} of MCP server {parts[0]}",
                              group="MCP_SERVER")
        return None

    @staticmethod
    def in_scope(turn: ToolSession, tool: ToolRecord) -> bool:
        return in_scope(tool.intent_code, tool.state_code, turn.intent, turn.state)

    async def catalogue(self, turn: ToolSession) -> list[dict[str, Any]]:
        """Tools the planner may use now: enabled ce_mcp_tool rows in scope, then MCP-server tools in scope."""
        tools = [{"tool_code": t.tool_code, "tool_group": t.group, "description": t.description}
                 for t in turn.snapshot.tools if t.enabled and self.in_scope(turn, t)]
        for name, server in self.mcp.settings.items():
            if in_scope(server.intent_code, server.state_code, turn.intent, turn.state):
                tools.extend(await self.mcp.tools(name))
        return tools

    def has_tools(self, turn: ToolSession) -> bool:
        return any(t.enabled and self.in_scope(turn, t) for t in turn.snapshot.tools) or any(
            in_scope(s.intent_code, s.state_code, turn.intent, turn.state) for s in self.mcp.settings.values())

    # --- execution --------------------------------------------------------------------

    async def execute(self, turn: ToolSession, tool: ToolRecord, args: dict[str, Any]) -> Any:
        """Run a granted tool; its result is capped at ``mcp.max_result_bytes`` (as JSON)."""
        return capped(await self._run(turn, tool, args), turn.settings.mcp.max_result_bytes, tool.tool_code)

    async def _run(self, turn: ToolSession, tool: ToolRecord, args: dict[str, Any]) -> Any:
        ctx = ToolContext.of(turn, tool)
        if tool.group == "MCP_SERVER" or split_code(tool.tool_code):
            async with waiting_outside():  # the turn's work slot is lent while the server answers
                return normalise_result(await self.mcp.call(tool.tool_code, args))
        handler = self._handler(tool.tool_code)
        if tool.group == "DB":
            value = await self._db(turn, tool, args, ctx, handler)
        else:
            target = handler or self.registries.tool_adapters.get(tool.group)
            if target is None:
                raise AdapterNotConfiguredError(f"No {GROUP_ADAPTER_NAMES.get(tool.group, tool.group)} configured "
                                                f"for tool_code={tool.tool_code.upper() or '(none)'}")
            async with waiting_outside():  # a handler or HTTP API answering lends the turn's work slot
                value = await call_handler(target, args, ctx)
                if isinstance(value, HttpRequest):
                    value = await self.http.execute(tool.tool_code, value, turn.settings.mcp.http_api)
        return normalise_result(value)

    async def _db(self, turn: ToolSession, tool: ToolRecord, args: dict[str, Any], ctx: ToolContext, handler: Handler | None) -> Any:
        if handler is not None:
            return await call_handler(handler, args, ctx)
        row = turn.snapshot.db_tool(tool.tool_id)
        if row is not None:
            return await self.db.run_template(tool, row, args, turn.settings.mcp.db, turn.audit)
        if tool.tool_code.lower() in RAW_SQL_TOOLS:
            return await self.db.run_raw(tool, args, turn.settings.mcp.db, turn.audit)
        adapter = self.registries.tool_adapters.get("DB")
        if adapter is not None:
            return await call_handler(adapter, args, ctx)
        raise AdapterNotConfiguredError(f"No DbToolHandler or ce_mcp_db_tool row for tool_code={tool.tool_code.upper()}")

    def _handler(self, tool_code: str) -> Any:
        handlers = self.registries.tool_handlers
        return handlers.get(tool_code) or next((h for code, h in handlers.items() if code.lower() == tool_code.lower()),
                                               None)


def capped(result: T, limit: int, tool_code: str) -> T:
    """The result, or TOOL_RESULT_TOO_LARGE when its JSON form exceeds ``limit`` bytes."""
    size = len(dumps(result))
    if size > limit:
        raise ToolError(f"tool {tool_code} returned {size} bytes; the limit is {limit} (mcp.max_result_bytes)",
                        code=ErrorCode.TOOL_RESULT_TOO_LARGE, recoverable=False)
    return result
