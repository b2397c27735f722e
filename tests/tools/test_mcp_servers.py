"""Real MCP servers (written here with the official SDK) called by the planner over stdio and HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from convengine.llm import ScriptedLLM
from tests.helpers import engine_on, pack, payload_of, turn_events

pytestmark = pytest.mark.asyncio

SERVER = textwrap.dedent('''
    import sys
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("ledger")

    @server.tool()
    def balance(account: str) -> dict:
        """The balance of an account."""
        if account == "boom":
            raise ToolError("ledger offline")
        return {"account": account, "balance": 120}

    @server.tool()
    def statement(account: str, months: int = 1) -> str:
        """A plain-text statement."""
        return f"{months} month(s) of statement for {account}"

    if __name__ == "__main__":
        if sys.argv[1:] == ["stdio"]:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
''')


def planner(*steps: dict[str, Any]) -> ScriptedLLM:
    replies = [{"action": "CALL_TOOL", "answer": None, "operation_tag": None, "args": {}, "tool_code": None, **s}
               for s in steps]
    return ScriptedLLM({"MCP_PLANNER": replies}, default={"dialogueAct": "NEW_REQUEST", "confidence": 0.9})


ANSWER_RESPONSE = [{"intent_code": "LOAN", "state_code": "START", "exact_text": "{{context.mcp.finalAnswer}}",
                    "priority": 1}]


def server_pack(server: dict[str, Any]) -> dict[str, Any]:
    return pack(ce_response=ANSWER_RESPONSE, settings={"mcp": {"servers": {"ledger": {
        "intent-code": "LOAN", "state-code": "ANY", "timeout-s": 60, **server}}}})


async def test_the_planner_calls_a_stdio_mcp_server(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ledger.py"
    script.write_text(SERVER)
    llm = planner({"tool_code": "mcp.ledger.balance", "args": {"account": "A1"}},
                  {"tool_code": "mcp.ledger.statement", "args": {"account": "A1", "months": 3}},
                  {"action": "ANSWER", "answer": "A1 has 120."})
    data = server_pack({"transport": "stdio", "command": sys.executable, "args": [str(script), "stdio"]})
    async with engine_on(db_url, data, llm=llm) as engine:
        hello = await engine.aprocess("hello")
        result = await engine.aprocess("loan: what is my balance?", hello.conversation_id)
        assert result.payload.value == "A1 has 120."
        observations = result.context["mcp"]["observations"]
        assert observations[0] == {"toolCode": "mcp.ledger.balance", "json": {"account": "A1", "balance": 120}}
        assert observations[1]["json"] == {"result": "3 month(s) of statement for A1"}  # the SDK's structured output
        offered = llm.calls_to("MCP_PLANNER")[0]
        assert "mcp.ledger.balance" in offered.user and "The balance of an account." in offered.user
        events = await turn_events(engine, hello.conversation_id)
        assert payload_of(events, "MCP_TOOL_RESULT")["tool_group"] == "MCP_SERVER"


async def test_an_mcp_tool_error_is_a_tool_error(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ledger.py"
    script.write_text(SERVER)
    llm = planner({"tool_code": "mcp.ledger.balance", "args": {"account": "boom"}})
    data = server_pack({"transport": "stdio", "command": sys.executable, "args": [str(script), "stdio"]})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan balance")
        assert result.payload.value == "Tool execution failed"
        error = payload_of(await turn_events(engine, result.conversation_id), "MCP_TOOL_ERROR")
        assert "ledger offline" in error["error"]


async def test_direct_requests_can_target_an_mcp_tool(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ledger.py"
    script.write_text(SERVER)
    data = server_pack({"transport": "stdio", "command": sys.executable, "args": [str(script), "stdio"]})
    async with engine_on(db_url, data) as engine:
        request = {"tool_code": "mcp.ledger.balance", "args": {"account": "Z9"}}
        result = await engine.aprocess("loan", input_params={"tool_request": request})
        shaped = payload_of(await turn_events(engine, result.conversation_id), "TOOL_ORCHESTRATION_RESULT")
        assert shaped["result"] == {"account": "Z9", "balance": 120} and shaped["tool_group"] == "MCP_SERVER"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(script: Path, port: int) -> subprocess.Popen[bytes]:
    """Start ``script`` serving on ``port`` and wait (before any turn runs) until it accepts connections."""
    process = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        if time.monotonic() >= deadline or process.poll() is not None:
            process.terminate()
            process.wait(timeout=10)
            raise AssertionError("MCP server did not start")
        time.sleep(0.1)


async def test_the_planner_calls_a_streamable_http_mcp_server(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ledger.py"
    script.write_text(SERVER)
    port = free_port()
    process = start_server(script, port)
    try:
        llm = planner({"tool_code": "mcp.ledger.balance", "args": {"account": "H1"}},
                      {"action": "ANSWER", "answer": "done over HTTP"})
        data = server_pack({"transport": "streamable_http", "url": f"http://127.0.0.1:{port}/mcp"})
        async with engine_on(db_url, data, llm=llm) as engine:
            result = await engine.aprocess("loan balance")
            assert result.payload.value == "done over HTTP"
            assert result.context["mcp"]["observations"][0]["json"]["account"] == "H1"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_an_unknown_server_or_tool_is_a_clear_error(db_url: str, tmp_path: Path) -> None:
    script = tmp_path / "ledger.py"
    script.write_text(SERVER)
    llm = planner({"tool_code": "mcp.ledger.missing", "args": {}})
    data = server_pack({"transport": "stdio", "command": sys.executable, "args": [str(script), "stdio"]})
    async with engine_on(db_url, data, llm=llm) as engine:
        result = await engine.aprocess("loan")
        error = payload_of(await turn_events(engine, result.conversation_id), "MCP_TOOL_ERROR")
        assert "has no tool 'missing'" in error["error"]
