"""Regenerate docs/console.png (the simulator, shown in the README), docs/console-turn.png (a turn) and
docs/console-analytics.png (the Analytics tab over three weeks of generated turns).

Starts ``convengine serve`` with the pizza example on a free loopback port, chats three turns in the
simulator with headless Chromium (Debian's package: scripts/browser installs it), opens the
conversation's last turn and saves a screenshot. Run: .venv/bin/python scripts/console_screenshot.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "console.png"
TURN = ROOT / "docs" / "console-turn.png"
ANALYTICS = ROOT / "docs" / "console-analytics.png"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "convengine.cli", "serve", "--url", f"sqlite:///{workdir / 'console.db'}",
               "--port", str(port), "--pack", str(ROOT / "examples" / "pizza.yaml"), "--scripted",
               str(ROOT / "examples" / "pizza_scripted.py"), "--log-level", "warning"]
    process = subprocess.Popen(command, env={**os.environ, "CONVENGINE_LLM__LOG_CALLS": "true"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("the server did not start")


def analytics(page: object, workdir: Path) -> None:
    """Three weeks of generated turns (bench/analytics.py's generator) in the server's database, then
    the Analytics tab."""
    sys.path.insert(0, str(ROOT))
    from datetime import UTC, datetime

    from bench.analytics import generate, insert

    insert(f"sqlite:///{workdir / 'console.db'}", generate(3_000, days=21, now=datetime.now(UTC), seed=5))
    page.click('.tab[data-tab="analytics"]')  # type: ignore[attr-defined]
    expect(page.locator("#analytics[data-loaded]")).to_have_count(1)  # type: ignore[attr-defined]
    page.screenshot(path=str(ANALYTICS), full_page=True)  # type: ignore[attr-defined]


def main() -> None:
    browser_path = os.environ.get("CONVENGINE_CHROMIUM") or shutil.which("chromium")
    if not browser_path:
        raise SystemExit("no chromium: run scripts/browser first")
    with tempfile.TemporaryDirectory() as workdir:
        process, base = serve(Path(workdir))
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=browser_path, headless=True,
                                                     args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(base + "/console")
                for count, text in enumerate(["I'd like a pizza", "when do you close?", "large please"], start=1):
                    page.fill("#message", text)
                    page.click("#send")
                    expect(page.locator(".msg.bot")).to_have_count(count)
                page.screenshot(path=str(OUTPUT))
                page.click("#open-sim-conversation")
                expect(page.locator("#turn h3")).to_have_text("Turn 3")
                page.locator('details[data-step="schema_extraction"] summary').click()
                page.evaluate("() => document.querySelector('#turns').scrollIntoView()")
                page.screenshot(path=str(TURN))
                analytics(page, Path(workdir))
                browser.close()
        finally:
            process.terminate()
            process.wait(timeout=30)
    print(f"wrote {OUTPUT}, {TURN} and {ANALYTICS}")


if __name__ == "__main__":
    main()
