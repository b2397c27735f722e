"""Ctrl-C reaches the main thread: the engine's background threads leave SIGINT and SIGTERM to it."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from convengine.engine import Engine
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads thread signal masks from /proc")


def _blocked(native_id: int | None) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)


def test_threads_the_engine_starts_never_take_ctrl_c_from_the_main_thread(tmp_path: Path) -> None:
    before = {t.native_id for t in threading.enumerate()}
    engine = Engine.open(f"sqlite:///{tmp_path / 'p.db'}", pack=EXAMPLES / "support_desk.yaml")
    try:
        assert engine.process("hello").turn == 1  # the database's worker threads are running too
        started = [t for t in threading.enumerate() if t.native_id not in before and t.native_id is not None]
        assert started, "the synchronous engine runs its loop on a thread of its own"
        for thread in started:
            mask = _blocked(thread.native_id)
            for sig in (signal.SIGINT, signal.SIGTERM):
                assert mask & (1 << (sig - 1)), f"thread {thread.name} would take {sig.name}"
        assert not _blocked(threading.main_thread().native_id) & (1 << (signal.SIGINT - 1))
    finally:
        engine.close()
