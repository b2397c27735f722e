"""Which audit events are kept: ConvEngine's enabled/level/include/exclude/rate-limit controls."""

from __future__ import annotations

import fnmatch
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from convengine.catalog import stages
from convengine.settings import AuditSettings

_STEP_STAGES = frozenset({stages.STEP_ENTER, stages.STEP_EXIT})
_ERROR_MARKERS = ("ERROR", "FAIL", "REJECTED")


def _matches(value: str, patterns: list[str]) -> bool:
    folded = value.casefold()
    return any(fnmatch.fnmatchcase(folded, p.casefold()) for p in patterns)


@dataclass
class AuditFilter:
    """Decides whether an event is kept; holds the rate-limit buckets across turns."""

    settings: AuditSettings
    _buckets: OrderedDict[tuple[str, str], tuple[float, int]] = field(default_factory=OrderedDict)

    def keep(self, stage: str, conversation_id: str, intent: str | None) -> bool:
        s = self.settings
        if not s.enabled or s.level == "NONE":
            return False
        if s.level == "STANDARD" and stage in _STEP_STAGES:
            return False
        if s.level == "ERROR_ONLY" and not any(m in stage.upper() for m in _ERROR_MARKERS):
            return False
        if s.include_stages and not _matches(stage, s.include_stages):
            return False
        if s.exclude_stages and _matches(stage, s.exclude_stages):
            return False
        if intent and s.include_intents and not _matches(intent, s.include_intents):
            return False
        if intent and s.exclude_intents and _matches(intent, s.exclude_intents):
            return False
        return not s.rate_limit.enabled or self._within_rate(stage, conversation_id)

    def sharing_buckets(self, settings: AuditSettings) -> AuditFilter:
        """A filter with other settings (a pinned version's) counting into the same rate-limit buckets."""
        return AuditFilter(settings, self._buckets)

    def bucket_count(self) -> int:
        """Rate-limit buckets currently tracked."""
        return len(self._buckets)

    def _within_rate(self, stage: str, conversation_id: str) -> bool:
        rl = self.settings.rate_limit
        key = (conversation_id if rl.per_conversation else "*", stage if rl.per_stage else "*")
        now = time.monotonic()
        start, count = self._buckets.get(key, (now, 0))
        if now - start >= rl.window_ms / 1000:
            start, count = now, 0
        self._buckets[key] = (start, count + 1)
        self._buckets.move_to_end(key)
        while len(self._buckets) > rl.max_tracked_buckets:
            self._buckets.popitem(last=False)
        return count < rl.max_events
