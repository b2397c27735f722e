"""What a replay against a draft reports: per conversation, the turns where the draft did something
other than what was recorded, and the conversations whose recording could not be replayed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

MAX_REPLAY = 1000
"""The most conversations one replay takes."""
MAX_REPLAY_TURNS = 5000
"""The most recorded turns one replay sends again: the conversations past it are listed as not
replayable (a replay runs every turn through the engine; a caller's long conversations must not
hold the server for hours)."""

Aspect = Literal["intent", "state", "status", "reply", "tools", "flow", "error"]
Feedback = Literal["up", "down"]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class ReplaySelection(_Model):
    """Which recorded conversations to replay: the latest ``last`` (by last activity) that match every
    filter given."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    last: int = Field(50, ge=1, le=MAX_REPLAY)
    intent: str | None = Field(None, max_length=200, description="The conversation's current intent.")
    feedback: Feedback | None = Field(None, description="Conversations with a thumbs up or down.")
    since: datetime | None = Field(None, description="Last activity at or after this time.")
    until: datetime | None = Field(None, description="Last activity before this time.")
    ran_on: int | None = Field(None, ge=1, description="Conversations pinned to this configuration version.")

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """In UTC, as the activity times are kept (SQLite compares them as text); no zone: UTC."""
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(UTC)
        except OverflowError:  # year 1 at +14:00, year 9999 at -14:00: no UTC time
            raise ValueError("is out of range: its UTC time falls outside years 1 to 9999") from None


class Difference(_Model):
    """One thing a replayed turn did otherwise: what was recorded and what the draft did."""

    aspect: Aspect
    recorded: Any = None
    replayed: Any = None


class TurnDiff(_Model):
    turn: int
    """The recorded turn's number in its conversation."""
    user: str
    differences: list[Difference]


class ConversationReplay(_Model):
    conversation_id: str
    turns: int
    """Turns replayed."""
    diffs: list[TurnDiff] = Field(default_factory=list)
    live_llm_calls: int = 0
    """Calls the recording could not answer that went to the live model (``live_llm=True``)."""

    @property
    def changed(self) -> bool:
        return bool(self.diffs)


class NotReplayable(_Model):
    conversation_id: str
    reason: str


class ReplayReport(_Model):
    """The replay of recorded conversations against ``version`` (the draft when ``draft``)."""

    version: int
    draft: bool
    replayed: list[ConversationReplay] = Field(default_factory=list)
    not_replayable: list[NotReplayable] = Field(default_factory=list)

    @property
    def changed(self) -> list[ConversationReplay]:
        """The conversations where the version did something other than what was recorded."""
        return [c for c in self.replayed if c.changed]

    def to_dict(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json", by_alias=True),
                "changed": [c.conversation_id for c in self.changed]}
