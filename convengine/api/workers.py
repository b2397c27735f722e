"""``convengine serve --workers N``: N server processes sharing one listening socket and one PostgreSQL
database, each with its own engine.

The parent process opens the engine once (the pack is imported and every setting checked, so a bad
configuration fails with one line before any worker starts), closes it, and hands uvicorn's process
supervisor an app factory. Each worker rebuilds the same engine options from :class:`ServeSpec` (passed
in an environment variable: spawned workers inherit the environment), opens its own engine and serves.
Any worker serves any turn (turns of one conversation are serialised by the database's per-conversation
lock) and any stream (events cross processes through LISTEN/NOTIFY); pack reloads reach every worker
through the same channel. SQLite is refused: its live streams do not cross processes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.loops.auto import auto_loop_factory

from convengine.api.app import create_app
from convengine.api.config import resolve_api
from convengine.api.protocols import bounded_protocol
from convengine.catalog.defaults import LIVE_CHANNEL
from convengine.catalog.errors import ConfigError
from convengine.config_loader.companions import choose_llm, pack_options
from convengine.engine import Engine
from convengine.security.logs import server_log_config
from convengine.settings import MAX_CONNECTIONS_PER_CLIENT, ApiSettings

SPEC_ENV = "CONVENGINE_SERVE_SPEC"
"""The environment variable a worker reads its :class:`ServeSpec` from."""


@dataclass(frozen=True)
class ServeSpec:
    """What ``convengine serve`` was asked for, in a form a spawned worker can rebuild the engine from."""

    url: str
    host: str
    pack: str | None = None
    tasks: str | None = None
    scripted: str | None = None
    llm: str = "auto"
    cors_origins: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    """Conversation tests every publish through the API must pass."""
    channel: str = LIVE_CHANNEL
    """The configuration channel served."""
    replace: bool = False
    """Import ``pack`` over a different configuration the database holds (otherwise refused)."""
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections_per_client: int = MAX_CONNECTIONS_PER_CLIENT

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeSpec:
        raw = os.environ.get(SPEC_ENV)
        if not raw:
            raise ConfigError(f"{SPEC_ENV} is not set: workers are started by `convengine serve --workers N`")
        data = json.loads(raw)
        return cls(**{**data, "cors_origins": tuple(data.get("cors_origins") or ()),
                      "tests": tuple(data.get("tests") or ())})

    def engine_options(self) -> dict[str, Any]:
        """The options ``convengine serve`` opens its engine with: the pack's tasks and scripted LLM (with or
        without a pack: --tasks and --scripted apply to a database's stored configuration too), or --llm."""
        options = pack_options(_path(self.pack), _path(self.tasks), _path(self.scripted))
        if self.pack:
            options["replace"] = self.replace
        if "llm" not in options and (chosen := choose_llm(self.llm)) is not None:
            options["llm"] = chosen
        options.update(conversation_tests=tuple(Path(t) for t in self.tests), channel=self.channel)
        return options


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


WorkerProtocol = bounded_protocol(10.0)
"""The bounded protocol of a worker (httptools', else h11's); :func:`app` sets its deadlines from the spec."""


def app() -> Any:
    """uvicorn's app factory, called in each worker: the API on a fresh engine of the spec's options."""
    spec = ServeSpec.from_env()
    WorkerProtocol.head_timeout_s = spec.head_timeout_s
    WorkerProtocol.body_timeout_s = spec.body_timeout_s
    WorkerProtocol.max_connections_per_client = spec.max_connections_per_client
    return create_app(spec.url, host=spec.host, cors_origins=spec.cors_origins, freeze_gc=True,
                      **spec.engine_options())


def require_postgres(is_postgres: bool, workers: int) -> None:
    if workers > 1 and not is_postgres:
        raise ConfigError(f"--workers {workers} needs a PostgreSQL database: on SQLite live streams do not cross "
                          "processes (serve SQLite with one worker)")


def serve_workers(spec: ServeSpec, workers: int, *, port: int, log_level: str,
                  announce: Callable[[], None] | None = None) -> None:
    """``workers`` processes on one socket (see :mod:`convengine.api.workers`): the engine is opened once
    here to import the pack and check the settings, then every worker opens its own."""
    async def check() -> ApiSettings:
        engine = await Engine.aopen(spec.url, **spec.engine_options())
        try:
            require_postgres(engine.is_postgres, workers)
            return resolve_api(engine.settings, host=spec.host, cors_origins=spec.cors_origins).settings
        finally:
            await engine.aclose()

    with asyncio.Runner(loop_factory=auto_loop_factory()) as runner:
        api = runner.run(check())
    ready = replace(spec, head_timeout_s=api.header_timeout_s, body_timeout_s=api.body_timeout_s,
                    max_connections_per_client=api.max_connections_per_client)
    os.environ[SPEC_ENV] = ready.to_env()
    if announce is not None:  # the configuration is good: tell where the workers will listen
        announce()
    uvicorn.run("convengine.api.workers:app", factory=True, workers=workers, host=spec.host, port=port,
                log_level=log_level, lifespan="on", http="convengine.api.workers:WorkerProtocol",
                limit_concurrency=api.max_concurrency, h11_max_incomplete_event_size=api.max_header_bytes,
                log_config=server_log_config(log_level))
