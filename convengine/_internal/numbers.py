"""Whole numbers the engine can keep: within the signed 64-bit range.

A conversation's state is checkpointed as msgpack, which holds integers of 64 bits at most; a longer
one reaching the state failed the turn with an internal error (``Integer exceeds 64-bit range``).
Every way in refuses one instead, with its own clear error: a caller's ``inputParams``, an LLM
reply, an end user's answer to a number entity, a flow expression.
"""

from __future__ import annotations

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
RANGE_TEXT = "the 64-bit range (-9223372036854775808 to 9223372036854775807)"


def in_range(value: int) -> bool:
    return INT_MIN <= value <= INT_MAX


def first_out_of_range(value: object) -> int | None:
    """The first whole number past the 64-bit range anywhere in ``value`` (JSON-like), or None."""
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, int) and not isinstance(item, bool) and not in_range(item):
            return item
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return None


def shown(value: int) -> str:
    """A short form of a number that may have thousands of digits (``str()`` refuses past 4,300)."""
    digits = value.bit_length() * 30103 // 100000 + 1
    return f"a number of about {digits} digits"
