"""The cross-process file lock SQLite turns hold: exclusive between holders, bounded waits, freed by a dying process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from convengine._internal.filelocks import FileLockTimeout, exclusive

pytestmark = pytest.mark.asyncio

HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    open(sys.argv[2], "w").write("held")
    time.sleep(60)
""")


async def test_two_holders_in_one_process_take_turns(tmp_path: Path) -> None:
    path, order = tmp_path / "a.lock", []

    async def hold(name: str) -> None:
        async with exclusive(path, 5):
            order.append(f"{name} in")
            await asyncio.sleep(0.05)
            order.append(f"{name} out")

    await asyncio.gather(hold("first"), hold("second"))
    assert order in (["first in", "first out", "second in", "second out"],
                     ["second in", "second out", "first in", "first out"])


async def test_a_lock_held_past_the_timeout_raises_and_is_then_free(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    async with exclusive(path, 5):
        started = time.monotonic()
        with pytest.raises(FileLockTimeout, match="held elsewhere for 0.2s"):
            async with exclusive(path, 0.2):
                pass
        assert 0.15 <= time.monotonic() - started < 2
    async with exclusive(path, 0.2):  # released by the block that held it
        pass


async def test_another_process_holds_it_until_it_dies(tmp_path: Path) -> None:
    path, ready = tmp_path / "a.lock", tmp_path / "ready"
    child = await asyncio.to_thread(subprocess.Popen, [sys.executable, "-c", HOLDER, str(path), str(ready)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
            await asyncio.sleep(0.02)
        with pytest.raises(FileLockTimeout):
            async with exclusive(path, 0.2):
                pass
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.wait, 30)
        async with exclusive(path, 5):  # the kernel freed it with the process
            pass
    finally:
        if child.poll() is None:
            child.kill()


async def test_a_cancelled_wait_leaves_nothing_held(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"

    async def wait_for_it() -> None:
        async with exclusive(path, 30):
            pass

    async with exclusive(path, 5):
        waiter = asyncio.create_task(wait_for_it())
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    async with exclusive(path, 0.2):
        pass
