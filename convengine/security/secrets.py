"""Secret properties (``conversation_memory.secret``): their values in this turn, and masking them.

Used by the turn's ``strip_secrets`` hook (memory/scopes.py) and by the LLM call log, which keeps
a secret that appears in a prompt or a reply masked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "***"
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
MIN_SUBSTRING_CHARS = 4
"""Secret values at least this long are masked inside longer texts too; shorter ones only when whole."""


def secret_values(known: Iterable[str], sources: Iterable[Mapping[str, Any]], declared: Sequence[str]) -> list[str]:
    """The ``known`` secret values (taken out earlier in the turn, found in a model's reply) and the values
    of the ``declared`` secret properties in ``sources`` (the turn's context and params), longest first."""
    found: list[str] = list(known)
    for source in sources:
        for name in declared:
            value = source.get(name)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
                found.append(str(value))
    return sorted(set(found), key=len, reverse=True)


def reply_secrets(text: str | None, declared: Iterable[str]) -> list[str]:
    """Values of secret properties in a model's JSON reply (an extraction brings a secret into the
    turn only after its call is logged, so the log masks what the reply itself carries)."""
    try:
        reply = json.loads(_FENCE.sub(r"\1", text or "").strip())
    except ValueError:
        return []
    if not isinstance(reply, dict):
        return []
    values = (reply.get(name) for name in declared)
    return [str(v) for v in values if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v)]


def mask(value: Any, secrets: list[str]) -> Any:
    """``value`` with every secret replaced by ``***`` (in strings, keys and nested values)."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if value == secret:
                return MASK
            if len(secret) >= MIN_SUBSTRING_CHARS and secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {mask(k, secrets): mask(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(v, secrets) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value
