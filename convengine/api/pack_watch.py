"""``convengine serve --reload``: re-import the pack when its file changes, without a restart.

The file's modification time and size are polled (``POLL_S``): one file needs no watcher service,
and polling also sees editors that save by replacing the file. A change is imported like
``convengine pack import`` (a new configuration version, every process told through the stamp) and
the engine reloads before the next turn. A pack that no longer validates is reported in one line and
the configuration served stays as it was; the next save is tried again. Python modules (tasks, a
scripted model) are not reloaded: restart the server for those.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from convengine.catalog.errors import ConvEngineError
from convengine.config_loader import import_pack, read_control_rows
from convengine.config_loader.identity import configuration_id
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from convengine.versions.lifecycle import record_import

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the pack file's modification time is read (seconds)."""


def file_mark(path: Path) -> tuple[float, int] | None:
    """The file's modification time and size, or None while it is missing (an editor mid-save)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime, stat.st_size


@dataclass
class PackWatcher:
    """Re-imports ``pack`` into ``engine``'s database whenever the file changes."""

    engine: Engine
    pack: Path
    report: Callable[[str], None] = logger.warning
    """Where the outcome of each reload is told (the CLI prints it)."""

    async def run(self) -> None:
        seen = file_mark(self.pack)
        while True:
            await asyncio.sleep(POLL_S)
            mark = file_mark(self.pack)
            if mark is None or mark == seen:
                continue
            seen = mark
            await self.reload()

    async def reload(self) -> None:
        try:
            version = await asyncio.to_thread(self._import)
            await self.engine.areload()
        except ConvEngineError as exc:
            reason = "; ".join(line.strip() for line in exc.message.splitlines() if line.strip())
            self.report(f"reload of {self.pack} refused, still serving the previous configuration: "
                        f"[{exc.code.value}] {reason}")
            return
        self.report(f"reloaded {self.pack} (configuration {version})")

    def _import(self) -> str:
        sync_engine = create_sync_engine(parse_database_url(self.engine.url))
        try:
            import_pack(sync_engine, self.pack, replace=True, on_change=record_import)
            return configuration_id(read_control_rows(sync_engine))
        finally:
            sync_engine.dispose()
