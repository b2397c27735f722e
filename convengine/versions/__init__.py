"""Versioned configuration: immutable versions, a draft, publishing gated by conversation tests,
rollback, channels (environments) and conversations pinned to the version they started on."""

from convengine.versions.content import DRAFT_CHANNEL, LIVE_CHANNEL, MIGRATIONS
from convengine.versions.diff import RowChange, TableDiff
from convengine.versions.lifecycle import (
    DraftNotNamedError,
    GateRequiredError,
    Publication,
    PublishRefusedError,
    ReplayChangedError,
)
from convengine.versions.manager import Versions
from convengine.versions.store import Channel, VersionInfo, VersionNotFoundError

__all__ = [
    "DRAFT_CHANNEL",
    "LIVE_CHANNEL",
    "MIGRATIONS",
    "Channel",
    "DraftNotNamedError",
    "GateRequiredError",
    "Publication",
    "PublishRefusedError",
    "ReplayChangedError",
    "RowChange",
    "TableDiff",
    "VersionInfo",
    "VersionNotFoundError",
    "Versions",
]
