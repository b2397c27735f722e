"""Readiness (``GET /ready``): whether the database answers, probed cheaply and at most once per interval.

``/health`` says the process is alive; ``/ready`` says it can serve turns, which needs its database.
A probe opens a fresh connection (not one of the turn pools, so a busy server is not reported down
and a probe never waits behind turns) and reads the database's catalogue, within
``api.readiness.timeout_s``. Its answer is reused for ``api.readiness.cache_s`` and concurrent
callers share one probe, so however often load balancers poll, the database sees at most one
probe per interval per process. The answer names no host, user or driver error: those go to the
server's log when readiness changes.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from convengine.settings import ReadinessSettings

logger = logging.getLogger(__name__)
Probe = Callable[[float], Awaitable[None]]
"""Raises when the database does not answer; takes the time it may use, in seconds."""


@dataclass(frozen=True, slots=True)
class ReadyState:
    ready: bool
    message: str | None = None
    """Why the server is not ready (no host, user or driver text)."""


class Readiness:
    """One probe at a time, its answer cached; see the module docstring."""

    def __init__(self, probe: Probe, settings: ReadinessSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._probe = probe
        self._timeout = settings.timeout_s
        self._cache = settings.cache_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._state: ReadyState | None = None
        self._checked_at = 0.0

    async def check(self) -> ReadyState:
        if self._fresh():
            assert self._state is not None
            return self._state
        async with self._lock:  # callers arriving during a probe share its answer
            if not self._fresh():
                self._remember(await self._run())
        assert self._state is not None
        return self._state

    def _fresh(self) -> bool:
        return self._state is not None and self._clock() - self._checked_at < self._cache

    async def _run(self) -> ReadyState:
        try:
            async with asyncio.timeout(self._timeout):
                await self._probe(self._timeout)
        except TimeoutError:
            return self._failed(f"the database did not answer within {self._timeout:g} s", None)
        except Exception as exc:  # noqa: BLE001 - any driver failure means the same to a load balancer
            return self._failed("the database cannot be reached", exc)
        return ReadyState(True)

    def _failed(self, message: str, exc: Exception | None) -> ReadyState:
        if self._state is None or self._state.ready:  # log the change, not every probe
            logger.warning("not ready: %s%s", message, f" ({type(exc).__name__}: {exc})" if exc else "")
        return ReadyState(False, message)

    def _remember(self, state: ReadyState) -> None:
        if state.ready and self._state is not None and not self._state.ready:
            logger.warning("ready again: the database answers")
        self._state = state
        self._checked_at = self._clock()


def postgres_probe(libpq_url: str) -> Probe:
    """A new connection and ``SELECT 1``."""

    async def probe(timeout_s: float) -> None:
        import psycopg

        connection = await psycopg.AsyncConnection.connect(libpq_url, connect_timeout=max(1, round(timeout_s)),
                                                           autocommit=True)
        async with connection:
            await connection.execute("SELECT 1")

    return probe


def sqlite_probe(path: Path | None) -> Probe:
    """A new connection (never creating the file) reading the schema page; waits at most ``timeout_s``
    for a lock another process holds."""

    def read(timeout_s: float) -> None:
        assert path is not None
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=timeout_s)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            connection.close()

    async def probe(timeout_s: float) -> None:
        if path is not None:  # an in-memory database lives as long as the process
            await asyncio.to_thread(read, timeout_s)

    return probe
