"""The console's browser tests share one headless Chromium and one console server per module and backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import BACKENDS
from tests.console.browser import Browser, console_server
from tests.servers import Server


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    opened = Browser()
    yield opened
    opened.close()
    assert opened.outside == [], f"requests left 127.0.0.1: {opened.outside}"


@pytest.fixture(scope="module", params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with console_server(request.param, tmp_path_factory.mktemp(f"console-{request.param}")) as running:
        yield running
