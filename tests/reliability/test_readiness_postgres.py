"""``/ready`` on PostgreSQL stopped and restarted under a running server: 503 while it is down (``/health``
stays 200), 200 again once it is back, and turns work again without restarting the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_readiness import FAST, READY, assert_not_ready, wait_for
from tests.reliability.test_postgres_restart import DedicatedPostgres, dedicated_postgres
from tests.servers import Server


@pytest.fixture
def postgres() -> Iterator[DedicatedPostgres]:
    """A PostgreSQL server of this test's own, stopped and started by it."""
    yield from dedicated_postgres()


def test_ready_is_503_while_postgres_is_down_and_200_once_it_is_back(postgres: DedicatedPostgres,
                                                                     tmp_path: Path) -> None:
    server = Server(postgres.url, tmp_path / "server.log", env=FAST)
    try:
        assert wait_for(server.base, 200).json() == READY
        postgres.stop()
        try:
            assert_not_ready(wait_for(server.base, 503), "the database cannot be reached", str(postgres.port))
            assert httpx.get(server.base + "/health", timeout=10).status_code == 200
        finally:
            postgres.start()
        assert wait_for(server.base, 200, within=30).json() == READY
        turn = httpx.post(server.base + "/api/v1/conversation/message", json={"message": "hello"}, timeout=30)
        assert turn.status_code == 200 and turn.json()["success"], turn.text
    finally:
        server.stop()
