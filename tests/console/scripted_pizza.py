"""``convengine serve --scripted`` file for the console's browser tests: the pizza model, slowed
down when the message says "slowly" (so a turn can be watched while it runs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from convengine import Delay, LlmCall, ScriptedLLM

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pizza_scripted.py"
_spec = importlib.util.spec_from_file_location("pizza_scripted", _EXAMPLE)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
SLOW_SECONDS = 3.0
INJECTED = '{"size": null, "note": "<img src=x onerror=\\"window.__xss=3\\"><script>window.__xss=4</script>"}'
"""The reply to a message saying "inject": markup the console must show as text."""


def _size(call: LlmCall) -> Any:
    if "inject" in call.user:
        return INJECTED
    if "explode" in call.user:
        return RuntimeError("the model is down")  # raised: the turn fails
    reply = _module.extract_size(call)
    return Delay(SLOW_SECONDS, reply) if "slowly" in call.user else reply


LLM = ScriptedLLM({"SCHEMA_EXTRACTION": _size,
                   "INTENT_AGENT": {"intent": None, "confidence": 0.0, "intentScores": []}})
