"""Tools: the registry of ce_mcp_tool rows and the executors per tool group (the steps that call them,
direct tool requests and the planner loop, are in nodes/)."""
