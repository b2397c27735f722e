"""MCP_SERVER tools: real MCP servers (stdio or streamable HTTP) through the official ``mcp`` SDK.

Servers are declared in ``mcp.servers``; their tools are addressed as ``mcp.<server>.<tool>``
and offered to the planner within the server's intent/state scope. Each server connection
lives in its own background task (the SDK's transports must be entered and exited by the
same task) for the engine's lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from convengine._internal.extras import needs_extra
from convengine.catalog.errors import ToolError
from convengine.settings import McpServerSettings

PREFIX = "mcp."


def split_code(tool_code: str) -> tuple[str, str] | None:
    """``mcp.<server>.<tool>`` -> (server, tool)."""
    if not tool_code.lower().startswith(PREFIX):
        return None
    server, _, tool = tool_code[len(PREFIX):].partition(".")
    return (server, tool) if server and tool else None


@dataclass
class _Connection:
    name: str
    settings: McpServerSettings
    session: Any = None
    tools: list[Any] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"mcp-server-{self.name}")
        await asyncio.wait_for(self.ready.wait(), timeout=self.settings.timeout_s)
        if self.error is not None:
            raise ToolError(f"MCP server {self.name!r} did not start: {type(self.error).__name__}: {self.error}")

    async def _run(self) -> None:
        try:
            with needs_extra("mcp", f"MCP server {self.name!r}"):
                from mcp import ClientSession

            async with self._transport() as streams, ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                self.tools = list((await session.list_tools()).tools)
                self.session = session
                self.ready.set()
                await self.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the server
            self.error = exc
            self.ready.set()
        finally:
            self.session = None

    def _transport(self) -> Any:
        s = self.settings
        if s.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if not s.command:
                raise ToolError(f"MCP server {self.name!r} (stdio) needs a command")
            return stdio_client(StdioServerParameters(command=s.command, args=list(s.args), env=dict(s.env) or None))
        from mcp.client.streamable_http import streamable_http_client

        if not s.url:
            raise ToolError(f"MCP server {self.name!r} (streamable_http) needs a url")
        if s.headers:
            from mcp.shared._httpx_utils import create_mcp_http_client

            return streamable_http_client(s.url, http_client=create_mcp_http_client(headers=dict(s.headers)))
        return streamable_http_client(s.url)

    async def close(self) -> None:
        self.closing.set()
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.task, timeout=10)


class McpServers:
    """Connections to the configured MCP servers, opened on first use."""

    def __init__(self, servers: dict[str, McpServerSettings]) -> None:
        self.settings = servers
        self._connections: dict[str, _Connection] = {}
        self._lock = asyncio.Lock()

    async def connection(self, name: str) -> _Connection:
        if name not in self.settings:
            raise ToolError(f"no MCP server named {name!r} in mcp.servers (configured: "
                            f"{', '.join(sorted(self.settings)) or 'none'})")
        async with self._lock:
            conn = self._connections.get(name)
            if conn is None or conn.session is None:
                conn = _Connection(name, self.settings[name])
                await conn.start()
                self._connections[name] = conn
            return conn

    async def tools(self, name: str) -> list[dict[str, Any]]:
        """The server's tools as planner entries."""
        conn = await self.connection(name)
        return [{"tool_code": f"{PREFIX}{name}.{t.name}", "tool_group": "MCP_SERVER",
                 "description": t.description or t.title or t.name, "input_schema": t.input_schema}
                for t in conn.tools]

    async def call(self, tool_code: str, args: dict[str, Any]) -> Any:
        parts = split_code(tool_code)
        if parts is None:
            raise ToolError(f"{tool_code!r} is not an MCP tool code (expected mcp.<server>.<tool>)")
        server, tool = parts
        conn = await self.connection(server)
        if tool not in {t.name for t in conn.tools}:
            raise ToolError(f"MCP server {server!r} has no tool {tool!r} (it has: "
                            f"{', '.join(t.name for t in conn.tools)})")
        result = await asyncio.wait_for(conn.session.call_tool(tool, args), timeout=conn.settings.timeout_s)
        return _result_value(tool_code, result)

    async def aclose(self) -> None:
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()


class ToolResult(Protocol):
    """What is read of an MCP ``CallToolResult``: its content blocks, error flag and structured content."""

    @property
    def content(self) -> Sequence[object] | None: ...

    @property
    def is_error(self) -> bool | None: ...

    @property
    def structured_content(self) -> Any: ...


def _result_value(tool_code: str, result: ToolResult) -> Any:
    texts = [getattr(block, "text", None) for block in result.content or []]
    text = "\n".join(t for t in texts if t)
    if result.is_error:
        raise ToolError(f"MCP tool {tool_code} reported an error: {text or 'no details'}")
    if result.structured_content is not None:
        return result.structured_content
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {"text": text}
