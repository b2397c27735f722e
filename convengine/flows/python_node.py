"""The ``python`` flow node: run the script, keep its changes or take the ``error`` edge."""

from __future__ import annotations

from typing import Any

from convengine._internal.sandbox.runner import run_script
from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.config.flows import Flow
from convengine.config.records import FlowNodeRecord
from convengine.flows.walk_state import NEXT, Result, Walk

MAX_ERROR_CHARS = 1000
"""What a failed script's error keeps (the child cuts its own to 500; a forged reply may say more)."""


async def run_script_node(walk: Walk, flow: Flow, node: FlowNodeRecord, config: dict[str, Any]) -> Result:
    settings = walk.turn.settings.flows
    # checked at load (flows.validate); bounded here too, whatever reached the node
    timeout = min(vocab.PYTHON_MAX_TIMEOUT_S, float(config.get("timeout_s") or settings.python_timeout_s))  # NaN: the max
    memory_mb = min(int(config.get("memory_mb") or settings.python_memory_mb), vocab.PYTHON_MAX_MEMORY_MB)
    inputs = {"session": walk.variables, "user": dict(walk.turn.read_params()), "flow": walk.frame_vars(),
              "tool_response": walk.last_service}
    result = await run_script(str(config["code"]), inputs, timeout_s=timeout, memory_mb=memory_mb,
                              max_output_chars=settings.python_max_output_chars, mode=settings.python_sandbox)
    # the reply is the script's to forge: its stdout is cut to the limit here, whatever the child said
    stdout = str(result.get("stdout") or "")[-settings.python_max_output_chars:]
    audit = {"flow": flow.code, "node": node.node_id, "stdout": stdout}
    if result.get("error"):
        walk.turn.audit(stages.FLOW_SCRIPT_FAILED, {**audit, "error": str(result["error"])[:MAX_ERROR_CHARS]})
        return Result("next", vocab.ERROR)
    if isinstance(result.get("session"), dict):
        walk.data["vars"] = result["session"]
    if isinstance(result.get("flow"), dict) and walk.stack:
        walk.stack[-1]["vars"] = result["flow"]
    walk.turn.audit(stages.FLOW_SCRIPT_RAN, audit)
    return NEXT
