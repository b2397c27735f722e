"""What a configuration needs from its host: the tasks its pending actions and SET_TASK rules call,
and the handlers its tools run on.

A pack is validated without the host's Python, so these are checked when an engine opens (and by
``convengine pack validate`` / ``chat`` with the pack's tasks file): every ``bean:method`` an
enabled ``ce_pending_action`` row or ``SET_TASK`` rule calls must resolve in the registered tasks.
A missing one is a warning naming the row, not an error: the rest of the configuration works, and
that action fails clearly (``TASK_NOT_FOUND``, audited) when a conversation reaches it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from convengine.catalog.vocab import SET_TASK
from convengine.config.snapshot import ConfigSnapshot
from convengine.registry import TaskNotFoundError, TaskRegistry


def task_references(snapshot: ConfigSnapshot) -> Iterator[tuple[str, str, str]]:
    """``(row, bean, method)`` for every task an enabled pending action or SET_TASK rule calls."""
    for action in snapshot.pending_actions:
        if action.enabled:
            row = f"ce_pending_action[{action.pending_action_id}] (action_key {action.action_key})"
            for method in _methods(action.method_names, action.bean_name):
                yield row, action.bean_name.strip(), method
    for rule in snapshot.rules:
        if rule.enabled and rule.action == SET_TASK and rule.action_value:
            bean, _, methods = rule.action_value.strip().partition(":")
            for method in _methods(methods, bean):
                yield f"ce_rule[{rule.rule_id}] (SET_TASK)", bean.strip(), method


def _methods(names: str | None, bean: str) -> list[str]:
    return [m.strip() for m in (names or bean).split(",") if m.strip()]


def unregistered_tasks(snapshot: ConfigSnapshot, tasks: Mapping[str, Any] | TaskRegistry | None) -> list[str]:
    """One warning per task the configuration calls that ``tasks`` does not provide."""
    registry = tasks if isinstance(tasks, TaskRegistry) else TaskRegistry(dict(tasks or {}))
    warnings = []
    for row, bean, method in task_references(snapshot):
        try:
            registry.resolve(bean, method)
        except TaskNotFoundError as exc:
            warnings.append(f"{row}: calls task {bean}:{method}, which the host has not registered "
                            f"({exc.message}); it fails with TASK_NOT_FOUND when reached")
    return warnings


def unregistered_tools(snapshot: ConfigSnapshot, handlers: Mapping[str, Any], adapters: Mapping[str, Any],
                       mcp_servers: Mapping[str, Any], raw_sql: frozenset[str]) -> list[str]:
    """One warning per enabled ``ce_mcp_tool`` row nothing can run: no handler for its code, no
    adapter for its group, and (DB tools) no ``ce_mcp_db_tool`` row and not a raw-SQL tool."""
    codes = {code.lower() for code in handlers}
    warnings = []
    for tool in snapshot.tools:
        code = tool.tool_code.lower()
        if not tool.enabled or code in codes or tool.group in adapters or code.split(".")[0] == "mcp":
            continue
        if tool.group == "DB" and (snapshot.db_tool(tool.tool_id) is not None or code in raw_sql):
            continue
        if tool.group == "MCP_SERVER" and code.split(".")[0] in mcp_servers:
            continue
        warnings.append(f"ce_mcp_tool[{tool.tool_id}] ({tool.tool_code}, group {tool.group}): no handler is "
                        "registered for it (Engine.open(tools={...}) or tool_adapters) and nothing else runs it; "
                        "it fails with TOOL_ADAPTER_NOT_CONFIGURED when called")
    return warnings
