"""The console's browser tests share one headless Chromium and one console server per module and backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.conftest import BACKENDS
from tests.console.browser import HEIGHT, WIDTH, Browser, console_server
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


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Any]:
    opened: Any = browser.page(WIDTH, HEIGHT)
    opened.goto(server.base + "/console")
    expect(opened.locator("body[data-ready=true]")).to_have_count(1)
    yield opened
    opened.context.close()
