"""A real headless Chromium (Debian's package, driven by Playwright) against a console server on
127.0.0.1, with every request leaving 127.0.0.1 refused and recorded, and screenshots kept."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import REQUIRE_PG, drop_postgres_database, new_postgres_database
from tests.console.support import PACK, SCRIPTED
from tests.servers import Server

ARTIFACTS = Path(os.environ.get("CONVENGINE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
LOCAL_HOSTS = ("127.0.0.1",)
WIDTH, HEIGHT = 1280, 800
"""The viewport the console must fit (its narrowest supported width)."""


def chromium_path() -> str:
    """Debian's chromium (scripts/browser installs it); a skip locally, a failure where tests must not skip."""
    found = os.environ.get("CONVENGINE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        message = "no chromium found: run scripts/browser (installs Debian's chromium package)"
        if REQUIRE_PG:  # CI: the browser is installed by scripts/test, so a missing one is a failure
            pytest.fail(message)
        pytest.skip(message)
    return found


@contextmanager
def console_server(backend: str, workdir: Path, *, log_calls: bool = True) -> Iterator[Server]:
    url = f"sqlite:///{workdir / 'console.db'}" if backend == "sqlite" else new_postgres_database()
    server = Server(url, workdir / "server.log", "--scripted", str(SCRIPTED), pack=PACK,
                    env={"CONVENGINE_LLM__LOG_CALLS": "true" if log_calls else "false"})
    try:
        yield server
    finally:
        server.stop()
        if backend != "sqlite":
            drop_postgres_database(url)


class Browser:
    """One Chromium for a test module; each test gets a fresh page whose outside requests are refused."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                                        args=["--no-sandbox", "--disable-gpu"])
        self.outside: list[str] = []

    def page(self, width: int = 1400, height: int = 1000) -> object:
        context = self.browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)

        def guard(route: object) -> None:
            request_url = route.request.url  # type: ignore[attr-defined]
            if urlparse(request_url).hostname in LOCAL_HOSTS:
                route.continue_()  # type: ignore[attr-defined]
            else:
                self.outside.append(request_url)
                route.abort()  # type: ignore[attr-defined]

        context.route("**/*", guard)
        context.set_default_timeout(15_000)
        return context.new_page()

    def close(self) -> None:
        self.browser.close()
        self._playwright.stop()


def screenshot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"console-{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path
