"""The ``python`` flow node: run the script, keep its changes or take the ``error`` edge.

The script's scopes: ``session`` and ``flow`` (read and write), ``user`` (this conversation's user's
long-term properties, ``conversation_memory.long_term`` less the secret ones: read and write, saved
for this user when the turn commits), ``workspace`` (the pack's ``flows.workspace`` values) and
``params`` (the turn's input params), both read-only, and ``tool_response``.
"""

from __future__ import annotations

from typing import Any

from convengine._internal.sandbox.runner import run_script
from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.walk_state import NEXT, Result, Walk
from convengine.nodes.turn import Turn

MAX_ERROR_CHARS = 1000
"""What a failed script's error keeps (the child cuts its own to 500; a forged reply may say more)."""


def user_properties(turn: Turn) -> list[str]:
    """The properties a script's ``user`` scope holds: the declared long-term ones that are not secret."""
    memory = turn.settings.conversation_memory
    return [name for name in memory.long_term if name not in set(memory.secret)]


def user_scope(turn: Turn) -> dict[str, Any]:
    context = turn.read_context()
    return {name: context[name] for name in user_properties(turn) if name in context}


async def run_script_node(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Result:
    settings = walk.turn.settings.flows
    # checked at load (flows.validate); bounded here too, whatever reached the node
    timeout = min(vocab.PYTHON_MAX_TIMEOUT_S, float(config.get("timeout_s") or settings.python_timeout_s))  # NaN: the max
    memory_mb = min(int(config.get("memory_mb") or settings.python_memory_mb), vocab.PYTHON_MAX_MEMORY_MB)
    user = user_scope(walk.turn)
    inputs = {"session": walk.variables, "user": user, "flow": walk.frame_vars(), "tool_response": walk.last_service,
              "workspace": dict(settings.workspace), "params": dict(walk.turn.read_params())}
    result = await run_script(str(config["code"]), inputs, timeout_s=timeout, memory_mb=memory_mb,
                              max_output_chars=settings.python_max_output_chars, mode=settings.python_sandbox)
    # the reply is the script's to forge: its stdout is cut to the limit here, whatever the child said
    stdout = str(result.get("stdout") or "")[-settings.python_max_output_chars:]
    audit = {"flow": flow.code, "node": node.node_id, "stdout": stdout}
    error = result.get("error") or _user_problem(walk.turn, result.get("user"))
    if error:
        walk.turn.audit(stages.FLOW_SCRIPT_FAILED, {**audit, "error": str(error)[:MAX_ERROR_CHARS]})
        return Result("next", vocab.ERROR)
    if isinstance(result.get("session"), dict):
        walk.data["vars"] = result["session"]
    if isinstance(result.get("flow"), dict) and walk.stack:
        walk.stack[-1]["vars"] = result["flow"]
    changed = _keep_user(walk.turn, user, result.get("user"))
    walk.turn.audit(stages.FLOW_SCRIPT_RAN, {**audit, "userChanged": changed} if changed else audit)
    return NEXT


def _user_problem(turn: Turn, values: object) -> str | None:
    """Why the script's ``user`` scope cannot be kept (None: it can): only the user's own long-term
    properties may be written."""
    if values is None:
        return None
    if not isinstance(values, dict):
        return "ValueError: the script replaced the user scope with something other than a dict"
    allowed = set(user_properties(turn))
    refused = sorted(str(name)[:80] for name in values if name not in allowed)
    if refused:
        return (f"PermissionError: user.{refused[0]} is not a long-term property of this user "
                f"(conversation_memory.long_term: {', '.join(sorted(allowed)) or 'none declared'})")
    return None


def _keep_user(turn: Turn, before: dict[str, Any], after: object) -> list[str]:
    """Write the changed properties into the conversation's context (saved for this user at commit)."""
    if not isinstance(after, dict):
        return []
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    for name in changed:
        turn.context[name] = after.get(name)  # None (deleted) removes the stored property
    return changed
