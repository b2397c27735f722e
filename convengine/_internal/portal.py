"""Running the engine's coroutines from synchronous code, including inside a running loop (Jupyter)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
CLOSED = "the engine is closed: open a new one (Engine.open / Engine.aopen)"


class Portal:
    """The event loop the engine's resources live on, reachable from any thread or loop.

    ``Portal()`` starts a private daemon thread running a new loop (sync use, Jupyter);
    ``Portal(loop)`` adopts a loop that is already running (async use).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, *, name: str = "convengine") -> None:
        self._thread: threading.Thread | None = None
        self.stopped = False
        """Set by :meth:`stop`: every later call is refused (the engine behind the portal is closed)."""
        if loop is not None:
            self.loop = loop
            return
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_serve, args=(self.loop,), name=name, daemon=True)
        self._thread.start()

    @property
    def owns_loop(self) -> bool:
        return self._thread is not None

    def on_loop(self) -> bool:
        """Whether the caller runs on the portal's loop (where :meth:`call` cannot block)."""
        return _running_loop() is self.loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and block until it finishes."""
        self._check_open(coro)
        if _running_loop() is self.loop:
            coro.close()
            raise RuntimeError("cannot block the engine's own event loop; use the async API (await engine.a...)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def acall(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` from any loop: directly on the portal's loop, through a future elsewhere."""
        self._check_open(coro)
        if _running_loop() is self.loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def _check_open(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self.stopped:
            coro.close()
            raise RuntimeError(CLOSED)

    def stop(self) -> None:
        self.stopped = True
        if self._thread is None or self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The portal thread: its loop, with Ctrl-C and SIGTERM left to the main thread.

    Python runs signal handlers on the main thread only. A signal the kernel hands to this thread
    (or to a thread started from its loop, which inherits the mask) would not interrupt the main
    thread's blocking read, and its KeyboardInterrupt could come late, past the code that handles it.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    loop.run_forever()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
