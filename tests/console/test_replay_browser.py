"""The console's Replay view in a real headless Chromium at 1,280 px: a draft that changes the ordered
reply shows exactly the conversation and turn it changes, recorded and draft side by side."""

from __future__ import annotations

from typing import Any

import httpx
import yaml
from playwright.sync_api import expect

from tests.console.browser import screenshot
from tests.console.support import PACK
from tests.console.test_browser_layout import fits
from tests.servers import Server


def message(server: Server, text: str, cid: str | None = None) -> str:
    body = {"message": text, **({"conversationId": cid} if cid else {})}
    response = httpx.post(f"{server.base}/api/v1/conversation/message", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["conversationId"])


def test_the_replay_view_shows_the_changed_conversation_turn_by_turn(page: Any, server: Server, tmp_path: Any) -> None:
    order = message(server, "I'd like a pizza")
    message(server, "medium", order)
    message(server, "when are you open?")
    pack = yaml.safe_load(PACK.read_text(encoding="utf-8").replace("pizza, coming up!", "pizza, on its way!"))
    drafted = httpx.post(f"{server.base}/api/v1/versions/draft", json={"pack": pack}, timeout=30)
    assert drafted.status_code == 201, drafted.text
    page.click('.tab[data-tab="replay"]')
    page.fill("#replay-last", "2")
    page.click("#replay-form button")
    expect(page.locator("#replay-summary")).to_contain_text("2 conversations replayed against draft")
    expect(page.locator("#replay-summary")).to_contain_text("1 changed, 0 not replayable")
    changed = page.locator("#replay-changed details")
    expect(changed).to_have_count(1)
    expect(changed.locator("summary")).to_contain_text(order)
    row = changed.locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(0)).to_have_text("2")
    expect(row.locator("td").nth(2)).to_have_text("reply")
    expect(row.locator("td").nth(3)).to_have_text("One medium pizza, coming up!")
    expect(row.locator("td").nth(4)).to_have_text("One medium pizza, on its way!")
    fits(page, "replay", tmp_path)
    screenshot(page, "replay")
