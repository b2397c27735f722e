"""The values a SET_INPUT_PARAM rule action (or a pack check of one) reads."""

from __future__ import annotations

import json
from typing import Any


def parse_input_params(raw: str) -> dict[str, Any]:
    """SET_INPUT_PARAM values: ``{"k":v}``, ``{"key":k,"value":v}``, ``[{key,value}]``, ``k:v``, ``k``."""
    text = raw.strip()
    if text.startswith("{"):
        obj = json.loads(text)
        if set(obj) == {"key", "value"}:
            return {str(obj["key"]): obj["value"]}
        return dict(obj)
    if text.startswith("["):
        items = json.loads(text)
        if not isinstance(items, list) or not all(isinstance(i, dict) and "key" in i for i in items):
            raise ValueError('a list must hold objects with a "key" (and a "value"): [{"key": "k", "value": 1}]')
        return {str(item["key"]): item.get("value") for item in items}
    key, sep, value = text.partition(":")
    if not sep:
        return {key.strip(): True}
    return {key.strip(): _coerce_scalar(value.strip())}


def _coerce_scalar(text: str) -> Any:
    lowered = text.lower()
    if lowered == "null":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text

