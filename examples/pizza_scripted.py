"""A ScriptedLLM that plays the model for examples/pizza.yaml, offline.

    convengine chat --url sqlite:///try/pizza.db --pack examples/pizza.yaml --scripted examples/pizza_scripted.py

Swap in a real chat model (``llm="openai"``) and the same pack works unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from convengine import LlmCall, ScriptedLLM

_SIZE = re.compile(r"\b(small|medium|large)\b", re.IGNORECASE)


def extract_size(call: LlmCall) -> dict[str, Any]:
    """The SCHEMA_EXTRACTION reply: the size named in the user's message, else null."""
    message = call.user.rpartition("User message:")[2]
    found = _SIZE.search(message)
    return {"size": found.group(1).lower() if found else None}


LLM = ScriptedLLM({
    "SCHEMA_EXTRACTION": extract_size,
    "INTENT_AGENT": {"intent": None, "confidence": 0.0, "intentScores": []},
})
