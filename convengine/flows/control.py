"""Turns that are events rather than user messages: the welcome event and the end of a handoff."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from convengine._internal.turn_io import TurnRequest, check_params, normalise_conversation_id
from convengine.settings import EngineSettings

EVENTS = frozenset({"welcome", "handoff_resume"})


def event_request(event: str, conversation_id: str | None, input_params: Mapping[str, Any] | None,
                  settings: EngineSettings) -> TurnRequest:
    """A checked request for an event turn (no user text)."""
    assert event in EVENTS
    cid = normalise_conversation_id(conversation_id) if conversation_id is not None else str(uuid.uuid4())
    return TurnRequest("", cid, check_params(input_params, settings.api.max_input_depth), False, event=event)
