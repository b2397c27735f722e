"""What the audit keeps of a turn's input: the caller's params (USER_INPUT ``inputParams``) and
what the turn changed in the context (ENGINE_RETURN ``contextChanges``).

Both are bounded so the audit stays small: a value whose JSON is longer than
:data:`VALUE_MAX_CHARS` is kept as a preview, at most :data:`MAX_KEYS` keys are listed, and a
request's params larger than :data:`PARAMS_MAX_BYTES` are named, not kept. Declared secret
properties (``conversation_memory.secret``) are masked here by name; every value of a secret is
masked again in the whole audit batch when the turn commits (convengine.memory.service).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from convengine._internal.jsontext import dumps
from convengine.catalog import state as keys
from convengine.catalog.state import caller_params
from convengine.nodes.turn import Turn
from convengine.security.secrets import MASK

VALUE_MAX_CHARS = 240
"""A recorded value whose JSON is longer is kept as ``{"truncated": <chars>, "preview": ...}``."""
PREVIEW_CHARS = 80
MAX_KEYS = 50
"""At most this many keys per list (added, changed, removed); the rest are counted in ``moreKeys``."""
PARAMS_MAX_BYTES = 8192
"""A request's params whose JSON is larger are not recorded: ``inputParamsOmitted`` names their size and keys."""


def remember_context(turn: Turn) -> None:
    """Keep the context the turn starts from (steps copy it before writing, so no copy is needed)."""
    turn.ctx.context_before = dict(turn.read_context())


def bounded(value: object) -> Any:
    """``value``, or a preview of its JSON when that is longer than :data:`VALUE_MAX_CHARS`."""
    text = dumps(value)
    if len(text) <= VALUE_MAX_CHARS:
        return value
    return {"truncated": len(text), "preview": text[:PREVIEW_CHARS]}


def _masked(name: str, value: object, secret_names: Iterable[str]) -> Any:
    return MASK if name in secret_names and value is not None else bounded(value)


def context_changes(turn: Turn, after: Mapping[str, Any]) -> dict[str, Any] | None:
    """The top-level context keys the turn added, changed (before and after) and removed; None when
    nothing changed (or the context the turn started from is unknown)."""
    before = turn.ctx.context_before
    if before is None:
        return None
    before = _json(before)
    secret = frozenset(turn.settings.conversation_memory.secret)
    added = [k for k in after if k not in before]
    changed = [k for k in after if k in before and after[k] != before[k]]
    removed = [k for k in before if k not in after]
    if not (added or changed or removed):
        return None
    out: dict[str, Any] = {}
    more = max(0, len(added) - MAX_KEYS) + max(0, len(changed) - MAX_KEYS) + max(0, len(removed) - MAX_KEYS)
    if added:
        out["added"] = {k: _masked(k, after[k], secret) for k in added[:MAX_KEYS]}
    if changed:
        out["changed"] = {k: {"before": _masked(k, before[k], secret), "after": _masked(k, after[k], secret)}
                          for k in changed[:MAX_KEYS]}
    if removed:
        out["removed"] = removed[:MAX_KEYS]
    if more:
        out["moreKeys"] = more
    return out


def input_params(turn: Turn) -> dict[str, Any]:
    """The USER_INPUT entries for the caller's params of this turn: ``inputParams`` (engine-computed
    keys left out, secret properties masked), or ``inputParamsOmitted`` when they are too large;
    nothing when the caller sent none."""
    sent = (turn.get(keys.TURN_INPUT) or {}).get("params") or {}
    params, _dropped = caller_params(sent)
    if not params:
        return {}
    secret = frozenset(turn.settings.conversation_memory.secret)
    params = {k: MASK if k in secret and v is not None else v for k, v in params.items()}
    size = len(dumps(params).encode())
    if size > PARAMS_MAX_BYTES:
        return {"inputParamsOmitted": {"bytes": size, "keys": sorted(params)[:MAX_KEYS]}}
    return {"inputParams": params}


def _json(value: Mapping[str, Any]) -> dict[str, Any]:
    """The context as the JSON columns hold it (what ``after`` is)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))
