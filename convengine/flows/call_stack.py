"""The flows' call stack in one turn: start or digress into the intent's flow, run the flow on top of the call
stack until a node waits or the root flow ends, and return from subflows and digressions."""

from __future__ import annotations

from typing import Any

from convengine._internal.jsontext import copy_tree
from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.catalog.errors import InvalidInputError
from convengine.catalog.vocab import UNKNOWN
from convengine.config.flows import Flow, catalog_of
from convengine.flows.compiler import run_flow
from convengine.flows.walk_state import Walk
from convengine.nodes.turn import Turn


def new_walk(turn: Turn) -> Walk:
    data = copy_tree(turn.get(keys.FLOW) or {})
    return Walk(turn, catalog_of(turn.snapshot), data, turn.settings.flows.max_steps_per_turn,
                input=turn.user_text)


def push(walk: Walk, flow: Flow, stage: str, *, at: str | None = None, intent: str | None = None,
         **extra: object) -> None:
    """Call ``flow`` (at its entry, or at node ``at``); ``intent`` is the intent the call serves."""
    entry = at or flow.entry
    frame = {"flow": flow.code, "node": entry, "mode": vocab.MODE_ENTER}
    if intent:
        frame["intent"] = intent
    walk.stack.append(frame)
    walk.turn.audit(stage, {walk.names.key: flow.code, "entry": entry, "depth": len(walk.stack), **extra,
                            **({"intent": intent} if intent else {})})


def begin(walk: Walk, event: str | None) -> None:
    """Put the flow this turn starts or digresses into on the stack (if any)."""
    turn = walk.turn
    if event == vocab.EVENT_WELCOME:
        code = turn.settings.flows.welcome_flow
        flow = walk.catalog.get(code) if code else None
        if flow is None or flow.entry is None:
            raise InvalidInputError("no welcome flow is configured (settings flows.welcome_flow names an "
                                    f"enabled ce_flow with a start node or entry_node; got {code!r})")
        if int(turn.get(keys.TURN) or 0) > 1:
            raise InvalidInputError("the welcome event only starts a new conversation")
        push(walk, flow, stages.FLOW_STARTED, cause="WELCOME")
        return
    found = walk.catalog.for_intent(turn.intent)
    if found is None:
        return
    flow, at = found
    if not walk.stack:
        push(walk, flow, stages.FLOW_STARTED, at=at, intent=turn.intent, cause="INTENT")
    elif turn.intent not in served_intents(walk) and walk.stack[-1].get("mode") == vocab.MODE_WAIT:
        walk.turn.audit(stages.FLOW_DIGRESSION, {"from": walk.stack[-1]["flow"], "at": walk.stack[-1]["node"],
                                                "to": flow.code, "entry": at or flow.entry, "intent": turn.intent})
        walk.stack[-1]["mode"] = vocab.MODE_REASK
        push(walk, flow, stages.FLOW_STARTED, at=at, intent=turn.intent, cause="DIGRESSION")


def frame_intent(walk: Walk, frame: dict[str, Any]) -> str | None:
    """The intent a call serves: the one that entered it, else its flow's ``intent_code``."""
    if frame.get("intent"):
        return str(frame["intent"])
    flow = walk.catalog.get(frame["flow"])
    return flow.record.intent_code if flow is not None else None


def served_intents(walk: Walk) -> set[str]:
    return {i for frame in walk.stack if (i := frame_intent(walk, frame))}


async def walk_stack(walk: Walk) -> None:
    """Run flows until one waits, hands off, or the stack empties."""
    while walk.stack:
        frame = walk.stack[-1]
        flow = walk.catalog.get(frame["flow"])
        if flow is None:  # the flow was removed by a reload: drop the call
            walk.stack.pop()
            continue
        mode = frame.get("mode") or vocab.MODE_ENTER
        stop = await run_flow(walk, flow, frame["node"], mode)
        if mode == vocab.MODE_WAIT:
            walk.input = None  # the answer is consumed by the node that waited for it
        frame["node"] = stop["node"]
        kind = stop["kind"]
        if kind == "wait":
            frame["mode"] = vocab.MODE_WAIT
            walk.turn.audit(walk.names.waiting, {walk.names.key: flow.code, "node": stop["node"]})
            return
        if kind == "call":
            frame["mode"] = vocab.MODE_RETURN
            called = walk.catalog.get(stop["flow"])
            assert called is not None  # checked by the subflow node
            push(walk, called, walk.names.started, cause="SUBFLOW", caller=flow.code)
            continue
        if kind == "handoff":
            frame["mode"] = vocab.MODE_RETURN
            walk.data["handoff"] = {"flow": flow.code, "node": stop["node"]}
            walk.turn.audit(stages.FLOW_HANDOFF, {"flow": flow.code, "node": stop["node"]})
            return
        walk.stack.pop()
        walk.turn.audit(walk.names.completed, {walk.names.key: flow.code, "node": stop["node"],
                                               "depth": len(walk.stack)})
        if walk.stack:
            parent = walk.stack[-1]
            walk.turn.audit(walk.names.returned, {walk.names.key: parent["flow"], "node": parent["node"],
                                                  "mode": parent.get("mode")})


def active_intent(walk: Walk) -> str:
    """The intent the conversation keeps: the innermost flow's with an intent, else UNKNOWN (root)."""
    for frame in reversed(walk.stack):
        if intent := frame_intent(walk, frame):
            return intent
    return UNKNOWN
