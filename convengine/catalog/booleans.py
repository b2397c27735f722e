"""The one way convengine reads a yes/no value: pack columns, ``ce_config`` rows, request params,
slot values and query strings all accept the same spellings.

True: ``true``, ``yes``, ``y``, ``on``, ``t``, ``1``; false: ``false``, ``no``, ``n``, ``off``, ``f``,
``0`` (case and surrounding blanks ignored), besides the booleans themselves and the numbers 1 and 0.
"""

from __future__ import annotations

TRUE_SPELLINGS: tuple[str, ...] = ("true", "yes", "y", "on", "t", "1")
FALSE_SPELLINGS: tuple[str, ...] = ("false", "no", "n", "off", "f", "0")
_WORDS = {**dict.fromkeys(TRUE_SPELLINGS, True), **dict.fromkeys(FALSE_SPELLINGS, False)}


def parse_bool(value: object) -> bool | None:
    """``value`` as a boolean, or None when it is not one of the accepted spellings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return True if value == 1 else False if value == 0 else None
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower())
    return None


def truthy(value: object) -> bool:
    """True only for a true spelling: anything else (absent, false, unreadable) is False."""
    return parse_bool(value) is True


def require_bool(value: object) -> bool:
    """``value`` as a boolean; ValueError naming the accepted spellings otherwise."""
    parsed = parse_bool(value)
    if parsed is None:
        raise ValueError(f"expected true or false ({', '.join(TRUE_SPELLINGS)} / {', '.join(FALSE_SPELLINGS)}), "
                         f"got {value!r}")
    return parsed
