"""The turn graph's ``flow`` step (after intent resolution, before the pipeline's response
resolution): handoff, welcome, start/digress/continue the active flow, answer, or skip."""

from __future__ import annotations

from typing import Any

from convengine.catalog import flows as vocab
from convengine.catalog import names, stages
from convengine.catalog import params as pk
from convengine.catalog import state as keys
from convengine.catalog.errors import InvalidInputError
from convengine.config.flows import catalog_of
from convengine.flows.call_stack import active_intent, begin, new_walk, walk_stack
from convengine.nodes.common import SkipAudit, Step
from convengine.nodes.turn import Turn


def turn_event(turn: Turn) -> str | None:
    return (turn.get(keys.TURN_INPUT) or {}).get("event")


async def flow_step(turn: Turn) -> None:
    walk = new_walk(turn)
    event = turn_event(turn)
    if turn.read_params().get(pk.RESET_REASON) and walk.data:
        turn.audit(stages.FLOW_RESET, {"stack": walk.data.get("stack"), "handoff": walk.data.get("handoff")})
        walk.data.clear()
    if walk.data.get("handoff"):
        if event != vocab.EVENT_HANDOFF_RESUME:
            _handoff_turn(turn, walk.data)
            return
        turn.audit(stages.FLOW_HANDOFF_RESUMED, dict(walk.data.pop("handoff")))
    elif event == vocab.EVENT_HANDOFF_RESUME:
        raise InvalidInputError("the conversation is not handed off to a human")
    else:
        begin(walk, event)
    if not walk.stack:
        turn.set(keys.FLOW, walk.data)  # nothing to walk (a reset may have cleared the stack)
        return
    await walk_stack(walk)
    if walk.data.get("handoff"):
        turn.set(keys.STATUS, vocab.HANDOFF_STATUS)
    turn.set(keys.FLOW, walk.data)
    turn.set_intent(active_intent(walk), cause="FLOW")
    payload = walk.payload()
    if payload is None:
        return  # the flow said nothing: the pipeline answers as usual
    _answer(turn, payload)


def _answer(turn: Turn, payload: dict[str, Any]) -> None:
    turn.set(keys.PAYLOAD, payload)
    turn.audit(stages.ASSISTANT_OUTPUT, {"output": payload["value"], "outputFormat": payload["type"],
                                    "responseType": "FLOW", "intent": turn.intent, "state": turn.state})
    turn.route_to(names.MEMORY if turn.settings.flow.memory.enabled else names.PERSIST_CONVERSATION)


def _handoff_turn(turn: Turn, data: dict[str, Any]) -> None:
    """A human has the conversation: record the user's message (streamed to subscribers), say nothing."""
    turn.set(keys.STATUS, vocab.HANDOFF_STATUS)
    turn.set_intent(str((turn.get(keys.TURN_START) or {}).get("intent") or turn.intent), cause="FLOW")
    turn.audit(stages.FLOW_HANDOFF_MESSAGE, {"text": turn.user_text, **data["handoff"]})
    turn.set(keys.PAYLOAD, {"type": "HANDOFF", "value": ""})
    turn.route_to(names.MEMORY if turn.settings.flow.memory.enabled else names.PERSIST_CONVERSATION)


def skip_without_flow(turn: Turn) -> SkipAudit | None:
    data = turn.get(keys.FLOW) or {}
    if data.get("stack") or data.get("handoff") or turn_event(turn):
        return None
    if catalog_of(turn.snapshot).for_intent(turn.intent) is not None:
        return None
    return None, {"reason": "NO_ACTIVE_FLOW"}


STEPS = (Step(names.FLOW, flow_step, skip=skip_without_flow, routes=(names.MEMORY, names.PERSIST_CONVERSATION)),)
