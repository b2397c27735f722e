"""What ``Engine.stats`` returns: one :class:`StatsRow` per group (intent, state, day or a mix) and the
total, and the query it answers (:class:`StatsQuery`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator
from pydantic.alias_generators import to_camel

from convengine.catalog.defaults import DEFAULT_IDLE_AFTER_S

Dimension = Literal["intent", "state", "day"]
DIMENSIONS: tuple[Dimension, ...] = ("intent", "state", "day")
MAX_TEXT = 200


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class StatsQuery(_Camel):
    """Which turns and conversations to count: a time window ``[since, until)`` (UTC days), one intent,
    one configuration version, one owner (an API key's or tenant's conversations only)."""

    since: datetime | None = None
    until: datetime | None = None
    by: tuple[Dimension, ...] = ()
    intent: str | None = Field(None, max_length=MAX_TEXT)
    version: int | None = Field(None, ge=1)
    owner: str | None = Field(None, exclude=True)
    idle_after_s: float = Field(DEFAULT_IDLE_AFTER_S, gt=0)
    now: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @field_validator("since", "until", "now")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("give a time with a time zone (e.g. 2025-01-31T00:00:00Z)")
        try:
            return value.astimezone(UTC)
        except OverflowError:  # year 1 at +14:00, year 9999 at -14:00: no UTC time
            raise ValueError("is out of range: its UTC time falls outside years 1 to 9999") from None

    @field_validator("intent")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain a NUL character")
        return value

    @field_validator("by", mode="before")
    @classmethod
    def _by(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)) and len(set(value)) != len(value):
            raise ValueError("name each of intent, state, day once")
        return value


class StatsRow(_Camel):
    """The numbers of one group (its ``intent`` / ``state`` / ``day`` set when grouped by them).

    Turn numbers count the group's completed, not undone turns; a conversation's outcome (ended,
    dropped off, contained) counts where its last turn was (its intent, state and day)."""

    intent: str | None = None
    state: str | None = None
    day: str | None = None
    conversations: int = 0
    """Conversations with at least one turn in the group."""
    turns: int = 0
    ended: int = 0
    """Conversations whose last turn ended them (a ``conversation_memory.end_states`` state)."""
    dropped_off: int = 0
    """Conversations whose last turn is here, not ended nor handed off, idle for ``idle_after_s``."""
    handoffs: int = 0
    """Conversations handed to a person by a turn of the group."""
    contained: int = 0
    """Conversations whose last turn is here that ended and were never handed off."""
    fallback_turns: int = 0
    unknown_turns: int = 0
    """Turns that ended with the intent UNKNOWN."""
    feedback_up: int = 0
    feedback_down: int = 0
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_cost: float = 0.0
    """An estimate: each call's tokens priced by ``llm.spend.prices`` when its turn was recorded."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def containment_rate(self) -> float | None:
        return _rate(self.contained, self.conversations)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fallback_rate(self) -> float | None:
        return _rate(self.fallback_turns, self.turns)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unknown_rate(self) -> float | None:
        return _rate(self.unknown_turns, self.turns)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


class Stats(_Camel):
    """The answer: the query, the total over it and one row per group (ordered by the group's keys)."""

    query: StatsQuery
    total: StatsRow
    rows: list[StatsRow]
