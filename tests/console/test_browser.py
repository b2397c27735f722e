"""The console in a real headless browser: chat in the simulator, undo, open the conversation,
expand a step, read an LLM prompt, follow a turn live, look at the configuration, open /docs.
Screenshots go to test-artifacts/; no request may leave 127.0.0.1."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.console.browser import Browser, screenshot
from tests.servers import Server


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[Any]:
    opened = browser.page()
    opened.goto(server.base + "/console")
    expect(opened.locator("body[data-ready=true]")).to_have_count(1)
    yield opened
    opened.context.close()
    assert browser.outside == [], f"requests left 127.0.0.1: {browser.outside}"


def drawn_width(page: Any, selector: str) -> int:
    """The width the picture was drawn at, once loaded (polled: the page's CSP forbids eval'd predicates)."""
    deadline = time.monotonic() + 10
    while True:
        width = int(page.locator(selector).evaluate("img => img.complete ? img.naturalWidth : 0"))
        if width or time.monotonic() > deadline:
            return width
        time.sleep(0.1)


def say(page: Any, text: str, replies: int) -> None:
    page.fill("#message", text)
    page.click("#send")
    expect(page.locator(".msg.bot")).to_have_count(replies)


def test_chat_undo_and_turn_view(page: Any, server: Server, tmp_path: Path) -> None:
    say(page, "I'd like a pizza", 1)
    expect(page.locator(".msg.bot").nth(0)).to_contain_text("Which size would you like")
    expect(page.locator(".msg.bot .meta").nth(0)).to_contain_text("intent ORDER_PIZZA · state CHOOSE_SIZE")
    say(page, "when do you close?", 2)
    say(page, "large please", 3)
    expect(page.locator(".msg.bot .meta").nth(2)).to_contain_text("state ORDERED")
    expect(page.locator(".msg.bot .diff").nth(2)).to_contain_text('+ size: "large"')
    screenshot(page, "simulator")

    page.click("#undo")
    expect(page.locator(".msg.bot.undone")).to_have_count(1)
    cid = page.locator("#sim-cid").inner_text()
    turns = httpx.get(f"{server.base}/console/api/conversations/{cid}/turns").json()["turns"]
    assert [t["undone"] for t in turns] == [False, False, True]

    page.click("#open-sim-conversation")
    expect(page.locator("#turns li")).to_have_count(3)
    expect(page.locator('#turns li[data-turn="3"]')).to_contain_text("(undone)")
    page.click('#turns li[data-turn="1"]')
    expect(page.locator("#turn h3")).to_have_text("Turn 1")
    step = page.locator('details[data-step="schema_extraction"]')
    expect(step.locator(".stage").first).not_to_be_visible()
    step.locator("summary").click()
    expect(step.locator(".stage", has_text="SCHEMA_EXTRACTION_LLM_OUTPUT")).to_be_visible()
    expect(page.locator('details.skipped[data-step="reset_conversation"]')).to_contain_text("skipped: NO_RESET_TRIGGER")
    expect(page.locator("pre.prompt")).to_contain_text("User message: I'd like a pizza")
    expect(page.locator("pre.reply")).to_have_text('{"size": null}')
    screenshot(page, "turn-view")

    with page.expect_download() as download:
        page.click("#export")
    saved = tmp_path / "replay.conv.yaml"
    download.value.save_as(saved)
    assert "replay of conversation " + cid in saved.read_text(encoding="utf-8")
    expect(page.locator("#export-text")).to_contain_text("SCHEMA_EXTRACTION")

    page.click('.tab[data-tab="conversations"]')
    page.fill("#search", cid[:13])
    page.click("#search-form button")
    expect(page.locator("#conversation-list tbody tr")).to_have_count(1)
    expect(page.locator("#conversation-list tbody tr")).to_contain_text("ORDER_PIZZA")


def test_follow_a_turn_live(page: Any) -> None:
    page.fill("#message", "I'd like a pizza slowly")
    page.click("#send")
    running = page.locator("#live li", has_text="STEP_ENTER schema_extraction")
    expect(running).to_be_visible()
    assert page.locator(".msg.bot").count() == 0  # the model is still thinking: the events came first
    expect(page.locator("#live-status")).to_have_text("turn running")
    screenshot(page, "live")
    expect(page.locator(".msg.bot")).to_have_count(1, timeout=20_000)
    expect(page.locator("#live li", has_text="PIPELINE_TIMING")).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("turn done")


def test_configuration_pictures_and_tables(page: Any) -> None:
    page.click('.tab[data-tab="configuration"]')
    for picture in ("#state-graph", "#turn-graph"):
        expect(page.locator(picture)).to_have_attribute("src", re.compile("^blob:"))
        assert drawn_width(page, picture) > 100
    expect(page.locator('details[data-table="ce_rule"]')).to_contain_text("ce_rule (1)")
    expect(page.locator("#warnings")).to_contain_text("none")
    screenshot(page, "configuration")


def test_docs_work_offline(page: Any, server: Server) -> None:
    page.goto(server.base + "/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/conversation/message")).to_be_visible()
    screenshot(page, "docs")
    assert page.request.get(server.base + "/redoc").status == 404  # ReDoc would load its logo from the internet


def test_turn_view_shows_the_context_diff_and_input_params(page: Any) -> None:
    page.fill("#params", '{"table": 7}')
    say(page, "I'd like a pizza", 1)
    page.fill("#params", "{}")
    say(page, "large please", 2)
    page.click("#open-sim-conversation")
    expect(page.locator("#turns li")).to_have_count(2)
    expect(page.locator("#turn h3")).to_have_text("Turn 2")  # the latest turn opens
    changes = page.locator("#context-changes")
    expect(changes.locator(".add", has_text='+ size: "large"')).to_be_visible()
    expect(changes.locator(".del", has_text="- memory:")).to_be_visible()  # changed: before and after
    expect(page.locator("#turn .input-params")).to_have_count(0)  # the caller sent no params this turn
    screenshot(page, "turn-context-diff")
    page.click('#turns li[data-turn="1"]')
    expect(page.locator("#turn h3")).to_have_text("Turn 1")
    expect(page.locator("#turn .input-params")).to_have_text('input params: {"table":7}')
    expect(changes.locator(".add", has_text='+ intent_lock: {"locked":true,"reason":"SCHEMA_INCOMPLETE"}')).to_be_visible()


def test_conversation_list_filters_by_feedback(page: Any, server: Server) -> None:
    say(page, "when are you open?", 1)
    cid = page.locator("#sim-cid").inner_text()
    sent = httpx.post(f"{server.base}/api/v1/conversation/feedback",
                      json={"conversationId": cid, "feedbackType": "THUMBS_DOWN"})
    assert sent.status_code == 200, sent.text
    page.click('.tab[data-tab="conversations"]')
    page.select_option("#feedback-filter", "THUMBS_DOWN")
    page.click("#search-form button")
    rows = page.locator("#conversation-list tbody tr")
    expect(rows.filter(has_text=cid)).to_have_count(1)
    expect(rows.filter(has_text="THUMBS_UP")).to_have_count(0)
    page.select_option("#feedback-filter", "NONE")
    page.click("#search-form button")
    expect(rows.filter(has_text=cid)).to_have_count(0)
    screenshot(page, "conversation-filters")


def test_follow_an_open_conversation_live(page: Any, server: Server) -> None:
    """A conversation opened in the browser follows turns sent by someone else, and lists them when done."""
    say(page, "when are you open?", 1)
    cid = page.locator("#sim-cid").inner_text()
    page.click("#open-sim-conversation")
    expect(page.locator("#turns li")).to_have_count(1)
    page.click("#follow-conversation")
    expect(page.locator("#conv-live-status")).to_have_text("connected")
    elsewhere = threading.Thread(target=lambda: httpx.post(
        f"{server.base}/api/v1/conversation/message", json={"message": "I'd like a pizza slowly", "conversationId": cid},
        timeout=30))
    elsewhere.start()
    try:
        expect(page.locator("#conv-live li", has_text="STEP_ENTER schema_extraction")).to_be_visible()
        expect(page.locator("#conv-live-status")).to_have_text("turn running")
        assert page.locator("#turns li").count() == 1  # the turn is still running: not listed yet
        screenshot(page, "conversation-live")
        expect(page.locator("#turns li")).to_have_count(2, timeout=20_000)
        expect(page.locator("#conv-live-status")).to_have_text("turn done")
        expect(page.locator('#turns li[data-turn="2"]')).to_contain_text("I'd like a pizza slowly")
    finally:
        elsewhere.join()
