"""Defaults that light modules (the CLI's option declarations) need without loading the settings model."""

from __future__ import annotations

DEFAULT_DATABASE_URL = "sqlite:///convengine.db"
"""The database an engine, the API and every CLI command use when no URL is given."""

LIVE_CHANNEL = "production"
"""The channel served unless another is chosen; the ce_* control tables mirror its version (what
ConvEngine's own readers see)."""

DEFAULT_IDLE_AFTER_S = 1800.0
"""Analytics: a conversation with no turn for this long that neither ended nor was handed off dropped off."""
