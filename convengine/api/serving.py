"""``convengine serve``: the engine opened first (so bad settings fail with one line before the server
starts), then uvicorn with the API's limits: requests served at once, connections per client address,
request-head size and time, body time (enforced by :mod:`convengine.api.protocols`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.loops.auto import auto_loop_factory

from convengine.api.app import create_app
from convengine.api.config import resolve_api
from convengine.api.pack_watch import PackWatcher
from convengine.api.protocols import bounded_protocol
from convengine.engine import Engine
from convengine.security.logs import server_log_config
from convengine.settings import ApiSettings


def server_config(app: FastAPI, api: ApiSettings, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn's configuration with the API's limits (``api.max_concurrency``, ``max_connections_per_client``,
    ``max_header_bytes``, ``header_timeout_s``, ``body_timeout_s``)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          http=bounded_protocol(api.header_timeout_s, api.body_timeout_s, api.max_connections_per_client),
                          limit_concurrency=api.max_concurrency,
                          h11_max_incomplete_event_size=api.max_header_bytes, log_config=server_log_config(log_level))


def addresses(host: str, port: int) -> list[str]:
    """What a server on ``host:port`` offers, one line each: the console, the API's documentation and
    the message endpoint."""
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    return [f"console:   {base}/console", f"API docs:  {base}/docs",
            f"API:       {base}/api/v1/conversation/message"]


@dataclass(frozen=True)
class ServeHooks:
    """What ``convengine serve`` adds around the server: where its addresses are told once the engine
    is open, and the pack file to re-import on change (``--reload``)."""

    announce: Callable[[str], None] | None = None
    reload_pack: Path | None = None


def serve(url: str, options: dict[str, Any], *, host: str, port: int, log_level: str,
          cors_origins: Sequence[str] = (), hooks: ServeHooks = ServeHooks()) -> None:
    """Open the engine, check the API's settings for ``host`` (ConfigError: one line saying what to set),
    then serve until interrupted."""
    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        runner.run(_serve(url, options, host=host, port=port, log_level=log_level, cors_origins=cors_origins,
                          hooks=hooks))


async def _serve(url: str, options: dict[str, Any], *, host: str, port: int, log_level: str,
                 cors_origins: Sequence[str], hooks: ServeHooks) -> None:
    engine = await Engine.aopen(url, **options)
    watcher: asyncio.Task[None] | None = None
    told: asyncio.Task[None] | None = None
    try:
        api = resolve_api(engine.settings, host=host, cors_origins=cors_origins)
        app = create_app(engine=engine, host=host, cors_origins=cors_origins, close_engine=True, freeze_gc=True)
        if hooks.reload_pack is not None:
            watch = PackWatcher(engine, hooks.reload_pack, **({"report": hooks.announce} if hooks.announce else {}))
            watcher = asyncio.create_task(watch.run())
        server = uvicorn.Server(server_config(app, api.settings, host=host, port=port, log_level=log_level))
        told = asyncio.create_task(_announce(server, hooks.announce, host, port)) if hooks.announce else None
        await server.serve()
    finally:
        for task in (watcher, told):
            if task is not None:
                task.cancel()
        await engine.aclose()


async def _announce(server: uvicorn.Server, announce: Callable[[str], None], host: str, port: int) -> None:
    """Tell the server's addresses once it listens (not before: a port in use fails first)."""
    while not server.started:
        await asyncio.sleep(0.05)
    for line in addresses(host, port):
        announce(line)
