"""The turn graph's ``flow`` step, with workflows: the turn goes to the workflow runtime when a workflow
runs, or none of the conversation flows takes the turn and a workflow is mapped to the turn's intent (or
``flows.root-workflow`` names one); otherwise the conversation flows' step runs as before."""

from __future__ import annotations

from typing import Any

from convengine.catalog import flows as flow_vocab
from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.config.flows import catalog_of
from convengine.flows import step as flows_step
from convengine.nodes.common import SkipAudit, Step
from convengine.nodes.turn import Turn
from convengine.workflows import runtime

RESPONSE_TYPE = "WORKFLOW"


def _flows_take(turn: Turn) -> bool:
    """A conversation flow is active, handed off, answers a turn event, or serves the turn's intent."""
    data = turn.get(keys.FLOW) or {}
    return bool(data.get("stack") or data.get("handoff") or flows_step.turn_event(turn)
                or catalog_of(turn.snapshot).for_intent(turn.intent) is not None)


def _workflow_takes(turn: Turn) -> bool:
    if (turn.get(keys.WORKFLOW) or {}).get("stack") and not turn.read_params().get(pk.RESET_REASON):
        return True
    return not _flows_take(turn) and runtime.entered(turn) is not None


async def step(turn: Turn) -> None:
    data = turn.get(keys.WORKFLOW) or {}
    if turn.read_params().get(pk.RESET_REASON) and data:
        turn.audit(stages.WORKFLOW_RESET, {"stack": data.get("stack")})
        turn.set(keys.WORKFLOW, {})
    if not _workflow_takes(turn):
        await flows_step.flow_step(turn)
        return
    walk = runtime.new_walk(turn)
    await runtime.run(walk)
    turn.set(keys.WORKFLOW, walk.data)
    payload = walk.payload()
    if payload is None:
        return  # the workflow said nothing: the pipeline answers as usual
    turn.set(keys.PAYLOAD, payload)
    turn.audit(stages.ASSISTANT_OUTPUT, {"output": payload["value"], "outputFormat": payload["type"],
                                         "responseType": RESPONSE_TYPE, "intent": turn.intent, "state": turn.state})
    turn.route_to(names.MEMORY if turn.settings.flow.memory.enabled else names.PERSIST_CONVERSATION)


def _skip(turn: Turn) -> SkipAudit | None:
    if _workflow_takes(turn):
        return None
    return flows_step.skip_without_flow(turn)


def position(state: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(workflow, node, mode) of each call on a conversation's workflow stack, outermost first."""
    frames = (state.get(keys.WORKFLOW) or {}).get("stack") or []
    return [(f["flow"], f["node"], f.get("mode") or flow_vocab.MODE_ENTER) for f in frames]


STEPS = (Step(names.FLOW, step, skip=_skip, routes=(names.MEMORY, names.PERSIST_CONVERSATION)),)
