"""Secret properties (``conversation_memory.secret``): their values in this turn, and masking them.

Used by the turn's ``strip_secrets`` hook (memory/scopes.py) and by the LLM call log, which keeps
a secret that appears in a prompt or a reply masked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

SECRET_VALUES = "secret_values"
MASK = "***"
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
MIN_SUBSTRING_CHARS = 4
"""Secret values at least this long are masked inside longer texts too; shorter ones only when whole."""


class SecretSource(Protocol):
    """The slice of a turn whose declared secret properties are looked up (the nodes' Turn)."""

    ctx: Any
    """The run context: its ``extras`` hold the secret values taken out this turn."""

    def read_params(self) -> Mapping[str, Any]: ...

    def read_context(self) -> Mapping[str, Any]: ...


def secret_values(turn: SecretSource, declared: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    found: list[str] = [*(turn.ctx.extras.get(SECRET_VALUES) or []), *extra]
    for source in (turn.read_context(), turn.read_params()):
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


def mask(value: object, secrets: list[str]) -> Any:
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
