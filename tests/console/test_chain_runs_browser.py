"""The console's Chain runs tab in a real headless browser: the run list, a run's steps, resuming a run
that waits for a person (SQLite: the views read the chains API, tested on both backends elsewhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.conftest import EXAMPLES
from tests.console.browser import Browser, screenshot
from tests.http_stub import http_server
from tests.servers import Server


def test_list_open_and_resume_a_waiting_run(browser: Browser, tmp_path: Path) -> None:
    with http_server(lambda path, body: (200, {"id": "R-1"})) as payments:
        env = {"PACK_PAYMENTS_URL": payments.url, "CONVENGINE_MCP__HTTP_API__ALLOWED_HOSTS": '["127.0.0.1"]'}
        server = Server(f"sqlite:///{tmp_path / 'console.db'}", tmp_path / "server.log",
                        pack=EXAMPLES / "chains_approvals.yaml", env=env)
        try:
            run = httpx.post(f"{server.base}/api/v1/chains/runs", timeout=30,
                             json={"chain": "REFUND", "input": {"order": "C9", "amount": 500}}).json()
            assert run["status"] == "WAITING"
            page: Any = browser.page()
            page.goto(server.base + "/console")
            expect(page.locator("body[data-ready=true]")).to_have_count(1)
            page.click("button[data-tab=chains]")
            row = page.locator(f"#run-list tr[data-run='{run['runId']}']")
            expect(row).to_contain_text("WAITING")
            row.click()
            expect(page.locator("#run-state")).to_contain_text("WAITING at approve")
            expect(page.locator("#run-steps li[data-step=approve]")).to_contain_text("WAITING")
            screenshot(page, "chain-run-waiting")
            page.fill("#answer", '{"approved": true}')
            page.click("#resume")
            expect(page.locator("#run-state")).to_contain_text("COMPLETED")
            expect(page.locator("#run-steps li[data-step=done]")).to_contain_text("Refund R-1 sent for order C9.")
            expect(page.locator("#resume-form")).to_be_hidden()
            screenshot(page, "chain-run-completed")
            page.context.close()
        finally:
            server.stop()
