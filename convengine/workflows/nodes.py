"""What each workflow node type does. Agents and knowledge are the conversation flows' own nodes (one
agent loop, one knowledge search); tools run through the engine's one tool bridge
(:class:`convengine.tools.runner.ToolRunner`); routing is the flows' edge selection with the flows'
expression evaluator (:func:`select_successor`)."""

from __future__ import annotations

from typing import Any

from convengine.catalog import flows as flow_vocab
from convengine.catalog import stages
from convengine.catalog import workflows as vocab
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.config.flows import Flow
from convengine.config.records import FlowEdgeRecord, FlowNodeRecord
from convengine.flows import nodes as flow_nodes
from convengine.flows.compiler import select_edge
from convengine.flows.nodes import Handler
from convengine.flows.walk_state import NEXT, FlowError, Result, Walk
from convengine.security.redact import redact_text


def _config(node: FlowNodeRecord) -> dict[str, Any]:
    return node.config if isinstance(node.config, dict) else {}


def _where(workflow: Flow, node: FlowNodeRecord) -> str:
    return f"workflow {workflow.code} node {node.node_id}"


def select_successor(walk: Walk, workflow: Flow, node_id: str, outcome: str | None = None) -> FlowEdgeRecord | None:
    """The edge a workflow follows from ``node_id``: the first enabled edge (by priority, the default edge
    last) for ``outcome`` whose ``condition.expr`` holds against the last user text (``text``) and the
    variables (``session.*``, ``user.*``)."""
    return select_edge(walk, workflow, node_id, outcome)


async def root_agent(walk: Walk, workflow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    """The workflow's root agent: the flows' agent node (its tools, ``max_steps``, memory), entered first."""
    return await flow_nodes.agent(walk, workflow, node, mode)


async def tool(walk: Walk, workflow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    """Run ``config.tool`` with ``config.args`` (templates rendered) through the tool bridge; the result is
    kept at ``session.<variable>`` (default the node id); ``error`` edge when it fails."""
    config = _config(node)
    code, variable = str(config["tool"]), str(config.get("variable") or node.node_id)
    runner = walk.turn.ctx.services.tools
    row = runner.find(walk.turn, code) if runner is not None else None
    if runner is None or row is None:
        raise FlowError(f"{_where(workflow, node)}: tool {code!r} is not registered (no enabled ce_mcp_tool row "
                        "or MCP server tool)")
    args = walk.render(config.get("args") or {}, _where(workflow, node))
    if not isinstance(args, dict):
        raise FlowError(f"{_where(workflow, node)}: args must be a JSON object")
    audit = {"workflow": workflow.code, "node": node.node_id, "tool": code, "variable": variable, "args": args}
    try:
        result = await runner.execute(walk.turn, row, args)
    except Exception as exc:  # noqa: BLE001 - a tool's failure takes the node's error edge
        code = exc.code if isinstance(exc, ConvEngineError) else ErrorCode.TOOL_EXECUTION_FAILED
        message = exc.message if isinstance(exc, ConvEngineError) else f"{type(exc).__name__}: {exc}"
        walk.turn.audit(stages.WORKFLOW_TOOL_EXECUTED, {**audit, "status": "ERROR", "errorCode": code.value,
                                                        "message": redact_text(message)})
        return Result("next", flow_vocab.ERROR)
    walk.variables[variable] = result
    walk.last_service = result
    walk.turn.audit(stages.WORKFLOW_TOOL_EXECUTED, {**audit, "status": "OK", "result": result})
    return NEXT


async def sub_workflow(walk: Walk, workflow: Flow, node: FlowNodeRecord, mode: str) -> Result:
    """Hand over to ``config.workflow``: it is entered at its first runnable node (its entry) and, when it
    ends, this workflow goes on at this node's next edge."""
    if mode == flow_vocab.MODE_RETURN:
        return NEXT
    called = str(_config(node)["workflow"])
    if walk.catalog.get(called) is None:
        raise FlowError(f"{_where(workflow, node)}: sub-workflow {called!r} is not an enabled workflow")
    walk.turn.audit(stages.WORKFLOW_CALL, {"workflow": workflow.code, "node": node.node_id, "subWorkflow": called})
    return Result("call", flow=called)


HANDLERS: dict[str, Handler] = {
    vocab.TRIGGER: flow_nodes.passthrough,
    vocab.ROUTER: flow_nodes.passthrough,
    vocab.DECISION: flow_nodes.passthrough,
    vocab.ROOT_AGENT: root_agent,
    vocab.AGENT: flow_nodes.agent,
    vocab.INSTRUCTION_AGENT: flow_nodes.agent,
    vocab.KNOWLEDGE: flow_nodes.knowledge,
    vocab.TOOL: tool,
    vocab.WORKFLOW: sub_workflow,
    vocab.END: flow_nodes.end,
}
"""The workflow runtime's node types (publish validation refuses every other)."""
