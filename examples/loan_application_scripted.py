"""A ScriptedLLM that plays the model for examples/loan_application.yaml, offline.

Each call site answers from the prompt with simple, predictable rules, so the pack runs in
`convengine chat --scripted` and in tests with no API key. Swap in a real chat model and the
same pack works unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from convengine import LlmCall, ScriptedLLM

_EDIT = re.compile(r"^\s*(change|set|update|make|actually)\b", re.I)
_NAME = re.compile(r"\b(?:my name is|i am|i'm|name:?)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
_AMOUNT = re.compile(r"\$?\s*(\d[\d,]*(?:\.\d+)?)\s*(k|thousand|dollars|usd)?\b", re.I)
_TERM = re.compile(r"\b(\d+)\s*(months?|years?)\b", re.I)


def _message(call: LlmCall) -> str:
    found = re.search(r"(?:Message|User message|User said):\s*(.*)$", call.user, re.M)
    return found.group(1).strip() if found else call.user


def dialogue_act(call: LlmCall) -> dict[str, Any]:
    text = _message(call)
    if _EDIT.match(text):
        return {"dialogueAct": "EDIT", "confidence": 0.92}
    if text.endswith("?"):
        return {"dialogueAct": "QUESTION", "confidence": 0.9}
    return {"dialogueAct": "ANSWER", "confidence": 0.85}


def extract(call: LlmCall) -> dict[str, Any]:
    text = _message(call)
    fields: dict[str, Any] = {"customerName": None, "amount": None, "termMonths": None}
    if name := _NAME.search(text):
        fields["customerName"] = name.group(1)
    term = _TERM.search(text)
    if term:
        fields["termMonths"] = int(term.group(1)) * (12 if term.group(2).lower().startswith("year") else 1)
    without_term = _TERM.sub(" ", text)
    for number, unit in _AMOUNT.findall(without_term):
        value = float(number.replace(",", "")) * (1000 if unit.lower() in ("k", "thousand") else 1)
        fields["amount"] = int(value) if value.is_integer() else value
        break
    return fields


def ask_for_missing(call: LlmCall) -> str:
    missing = re.search(r"Still missing: (.*)", call.user)
    needed = (missing.group(1) if missing else "").strip("[] ").replace('"', "")
    return f"Thanks! To continue I need: {needed}." if needed else "Thanks, I have everything I need."


LLM = ScriptedLLM({
    "DIALOGUE_ACT": dialogue_act,
    "SCHEMA_EXTRACTION": extract,
    "RESPONSE_TEXT": ask_for_missing,
    "INTENT_AGENT": {"intent": None, "confidence": 0.0, "intentScores": []},
})
