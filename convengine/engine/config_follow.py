"""Following configuration changes: reload on demand, and before a turn when another process
imported or refreshed the configuration (the stamp)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from convengine._internal.turn_io import database_detail
from convengine.config_loader import ConfigSnapshot, stamp
from convengine.engine.resources import EngineResources
from convengine.versions.lifecycle import sync_live
from convengine.versions.serving import VersionServing

logger = logging.getLogger(__name__)


@dataclass
class ConfigFollower:
    """The configuration an engine serves, kept current."""

    resources: EngineResources
    versions: VersionServing | None = None
    """The version each turn runs on (served once the engine has started)."""
    checked_at: float = 0.0
    """When the stamp was last read (monotonic seconds; 0: read it before the next turn)."""

    async def reload(self) -> ConfigSnapshot:
        """Reload the configuration here and in every other process (cache refresh)."""
        sync_engine = self.resources.sync_engine
        await asyncio.to_thread(sync_live, sync_engine)  # direct table edits become a version
        return self.apply(await asyncio.to_thread(self.resources.holder.refresh))

    def apply(self, snapshot: ConfigSnapshot) -> ConfigSnapshot:
        if self.versions is not None:  # re-read the channel before the next turn
            self.versions.changed()
        self.resources.audit_filter.settings = snapshot.settings.audit
        self.resources.locks.timeout_s = snapshot.settings.turn_lock_timeout_s
        return snapshot

    def look_for_changes(self) -> None:
        """Check the configuration stamp before the next turn (a change was just made)."""
        self.checked_at = 0.0

    async def follow(self) -> None:
        """Reload when another process imported or refreshed the configuration (checked at most
        every ``stamp.CHECK_INTERVAL_S``; a rejected configuration keeps the current one)."""
        now = time.monotonic()
        if now - self.checked_at < stamp.CHECK_INTERVAL_S:
            return
        self.checked_at = now
        holder = self.resources.holder
        try:
            if holder.is_stale(await stamp.aread(self.resources.async_engine)):
                self.apply(await asyncio.to_thread(holder.reload, raise_on_error=False))
        except (SQLAlchemyError, OSError) as exc:  # the turn itself reports a database that is gone
            logger.warning("could not check for a configuration change: %s", database_detail(exc))
