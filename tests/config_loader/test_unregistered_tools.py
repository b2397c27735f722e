"""Tools a pack grants that nothing can run are reported when the engine opens."""

from __future__ import annotations

from typing import Any

from convengine import Engine
from tests.helpers import pack


def tool(tool_id: int, code: str, group: str) -> dict[str, Any]:
    return {"tool_id": tool_id, "tool_code": code, "tool_group": group, "intent_code": "LOAN", "state_code": "ANY"}


def test_tools_without_a_handler_are_warnings_naming_the_row(db_url: str) -> None:
    data = pack(ce_mcp_tool=[tool(1, "rates.lookup", "HTTP_API"), tool(2, "orders.find", "DB"),
                             tool(3, "db.query", "DB"), tool(4, "quote.get", "HTTP_API")])
    engine = Engine.open(db_url, pack=data, tools={"quote.get": lambda args, ctx: {"quote": 1}})
    try:
        missing = [w for w in engine.warnings if w.startswith("ce_mcp_tool[")]
        assert [w.split(" ")[0] for w in missing] == ["ce_mcp_tool[1]", "ce_mcp_tool[2]"]
        assert "rates.lookup" in missing[0] and "TOOL_ADAPTER_NOT_CONFIGURED" in missing[0]
    finally:
        engine.close()
