"""One turn of a workflow: which workflow the turn enters (the one running, the one mapped to the turn's
intent, or the root workflow), and the walk over the call stack of workflows, on the flows' walker
(each workflow is compiled once per configuration version into a LangGraph graph)."""

from __future__ import annotations

from convengine._internal.jsontext import copy_tree
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.config.flows import Flow, FlowCatalog, workflow_catalog_of
from convengine.flows.call_stack import push, walk_stack
from convengine.flows.walk_state import Walk, WalkStages
from convengine.nodes.turn import Turn
from convengine.workflows.nodes import HANDLERS

STAGES = WalkStages(key="workflow", started=stages.WORKFLOW_STARTED, node=stages.WORKFLOW_NODE,
                    waiting=stages.WORKFLOW_WAITING, completed=stages.WORKFLOW_COMPLETED,
                    returned=stages.WORKFLOW_RETURNED, routed=stages.WORKFLOW_ROUTED)
CAUSE_INTENT, CAUSE_ROOT = "INTENT", "ROOT"


def catalog(turn: Turn) -> FlowCatalog:
    return workflow_catalog_of(turn.snapshot)


def new_walk(turn: Turn) -> Walk:
    """The walk of this turn over the conversation's workflow position (``EngineState['workflow']``)."""
    data = copy_tree(turn.get(keys.WORKFLOW) or {})
    return Walk(turn, catalog(turn), data, turn.settings.flows.max_steps_per_turn, input=turn.user_text,
                handlers=HANDLERS, names=STAGES)


def entered(turn: Turn) -> tuple[Flow, str | None, str] | None:
    """The workflow a turn with no workflow running enters: the one whose ``intent_code`` is the turn's
    intent, else ``flows.root-workflow``; with the node it is entered at (None: its entry) and the cause."""
    found = catalog(turn).for_intent(turn.intent)
    if found is not None:
        return found[0], found[1], CAUSE_INTENT
    root = turn.settings.flows.root_workflow
    workflow = catalog(turn).get(root) if root else None
    return (workflow, None, CAUSE_ROOT) if workflow is not None else None


async def run(walk: Walk) -> None:
    """Start the workflow the turn enters when none runs, then walk until a node waits or the stack empties."""
    if not walk.stack:
        found = entered(walk.turn)
        if found is None:
            return
        workflow, at, cause = found
        push(walk, workflow, STAGES.started, at=at, cause=cause)
    await walk_stack(walk)
