"""Tools: the registry of ce_mcp_tool rows, executors per tool group, direct calls and the planner loop."""
