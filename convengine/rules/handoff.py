"""The ``HANDOFF`` rule action: a rule hands the conversation to a human, like a ``handoff`` node.

The conversation's status becomes ``HANDOFF`` when the turn commits: from the next message the bot
says nothing, each user message is recorded and streamed (``FLOW_HANDOFF_MESSAGE``) and
``Engine.resume_from_handoff`` (or the admin endpoint) gives it back. The turn that handed off
answers as usual (the pipeline's response says so). Resuming continues the flow that was waiting,
if any, at its question; otherwise the usual pipeline answers the resume event.
"""

from __future__ import annotations

from typing import Any

from convengine._internal.jsontext import copy_tree
from convengine.catalog import flows as vocab
from convengine.catalog import stages
from convengine.catalog import state as keys
from convengine.rules.model import RuleSession


def hand_off(session: RuleSession, rule_id: int, reason: str) -> dict[str, Any]:
    """Mark ``session`` (the turn) handed off by rule ``rule_id``; returns the rule audit payload."""
    data = copy_tree(session.get(keys.FLOW) or {})
    frame = (data.get("stack") or [None])[-1]
    data["handoff"] = {"rule": rule_id, **({"reason": reason} if reason else {}),
                       **({"flow": frame["flow"], "node": frame["node"]} if frame else {})}
    if frame is not None:
        frame["mode"] = vocab.MODE_REASK  # on resume, the waiting node asks its question again
    session.set(keys.FLOW, data)
    session.set(keys.STATUS, vocab.HANDOFF_STATUS)
    session.audit(stages.FLOW_HANDOFF, dict(data["handoff"]))
    return {"ruleId": rule_id, "status": vocab.HANDOFF_STATUS, **({"reason": reason} if reason else {})}
