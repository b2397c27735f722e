"""Fixtures of the attack suite: a world capture around each attack, a live server per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.world import World
from tests.servers import Server


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[Any]:
    """``serve(*args, pack=..., env=...)`` starts ``convengine serve`` on this test's database."""
    servers: list[Server] = []

    def start(*extra: str, **kwargs: Any) -> Server:
        server = Server(db_url, tmp_path / f"server{len(servers)}.log", *extra, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def world(db_url: str) -> Any:
    """``world(attacker=[cid])`` captures what an attack must leave unchanged."""

    def capture(attacker: Any = ()) -> World:
        return World.capture(db_url, attacker=[attacker] if isinstance(attacker, str) else attacker)

    return capture
