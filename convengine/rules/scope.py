"""Scoping of configuration rows by (intent, state): which rows apply, and how specifically."""

from __future__ import annotations

from convengine.catalog.vocab import ANY


def in_scope(row_intent: str | None, row_state: str | None, intent: str, state: str) -> bool:
    """A row scoped (intent, state) applies when each is equal or ANY (null = ANY)."""
    return row_intent in (None, ANY, intent) and row_state in (None, ANY, state)


def specificity(row_intent: str | None, row_state: str | None, intent: str, state: str) -> int:
    """exact intent + exact state 3 > intent + ANY 2 > ANY + state 1 > ANY + ANY 0."""
    return (2 if row_intent == intent else 0) + (1 if row_state == state else 0)
