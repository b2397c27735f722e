"""Analytics: how the assistant is doing, per intent, state and day, aggregated with SQL from the
tables the engine writes (``ce_conversation_step``'s stats columns, ``ce_conversation``,
``ce_mcp_user_feedback``); see docs/console.md#analytics."""

from convengine.analytics.model import DIMENSIONS, Stats, StatsQuery, StatsRow
from convengine.analytics.queries import stats

__all__ = ["DIMENSIONS", "Stats", "StatsQuery", "StatsRow", "stats"]
