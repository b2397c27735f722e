"""The walker of one turn: start or digress into the intent's flow, run the flow on top of the call
stack until a node waits or the root flow ends, and return from subflows and digressions."""

from __future__ import annotations

import copy
from typing import Any

from convengine import state as keys
from convengine.errors import InvalidInputError
from convengine.flows import vocab
from convengine.flows.catalog import Flow, catalog_of
from convengine.flows.compiler import run_flow
from convengine.flows.walk import Walk
from convengine.nodes.turn import Turn
from convengine.vocab import UNKNOWN


def new_walk(turn: Turn) -> Walk:
    data = copy.deepcopy(turn.get(vocab.STATE_KEY) or {})
    return Walk(turn, catalog_of(turn.snapshot), data, turn.settings.flows.max_steps_per_turn,
                input=turn.user_text)


def push(walk: Walk, flow: Flow, stage: str, **extra: Any) -> None:
    entry = flow.entry
    walk.stack.append({"flow": flow.code, "node": entry, "mode": vocab.MODE_ENTER})
    walk.turn.audit(stage, {"flow": flow.code, "entry": entry, "depth": len(walk.stack), **extra})


def begin(walk: Walk, event: str | None) -> None:
    """Put the flow this turn starts or digresses into on the stack (if any)."""
    turn = walk.turn
    if event == vocab.EVENT_WELCOME:
        code = turn.settings.flows.welcome_flow
        flow = walk.catalog.get(code) if code else None
        if flow is None:
            raise InvalidInputError("no welcome flow is configured (settings flows.welcome_flow names an "
                                    f"enabled ce_flow; got {code!r})")
        if int(turn.get(keys.TURN) or 0) > 1:
            raise InvalidInputError("the welcome event only starts a new conversation")
        push(walk, flow, vocab.FLOW_STARTED, cause="WELCOME")
        return
    flow = walk.catalog.for_intent(turn.intent)
    if flow is None:
        return
    active = {frame["flow"] for frame in walk.stack}
    if not walk.stack:
        push(walk, flow, vocab.FLOW_STARTED, cause="INTENT", intent=turn.intent)
    elif flow.code not in active and walk.stack[-1].get("mode") == vocab.MODE_WAIT:
        walk.turn.audit(vocab.FLOW_DIGRESSION, {"from": walk.stack[-1]["flow"], "at": walk.stack[-1]["node"],
                                                "to": flow.code, "intent": turn.intent})
        walk.stack[-1]["mode"] = vocab.MODE_REASK
        push(walk, flow, vocab.FLOW_STARTED, cause="DIGRESSION", intent=turn.intent)


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
            walk.turn.audit(vocab.FLOW_WAITING, {"flow": flow.code, "node": stop["node"]})
            return
        if kind == "call":
            frame["mode"] = vocab.MODE_RETURN
            called = walk.catalog.get(stop["flow"])
            assert called is not None  # checked by the subflow node
            push(walk, called, vocab.FLOW_STARTED, cause="SUBFLOW", caller=flow.code)
            continue
        if kind == "handoff":
            frame["mode"] = vocab.MODE_RETURN
            walk.data["handoff"] = {"flow": flow.code, "node": stop["node"]}
            walk.turn.audit(vocab.FLOW_HANDOFF, {"flow": flow.code, "node": stop["node"]})
            return
        walk.stack.pop()
        walk.turn.audit(vocab.FLOW_COMPLETED, {"flow": flow.code, "node": stop["node"], "depth": len(walk.stack)})
        if walk.stack:
            parent = walk.stack[-1]
            walk.turn.audit(vocab.FLOW_RETURNED, {"flow": parent["flow"], "node": parent["node"],
                                                  "mode": parent.get("mode")})


def active_intent(walk: Walk) -> str:
    """The intent the conversation keeps: the innermost flow's with an intent, else UNKNOWN (root)."""
    for frame in reversed(walk.stack):
        flow = walk.catalog.get(frame["flow"])
        if flow is not None and flow.record.intent_code:
            return flow.record.intent_code
    return UNKNOWN
