"""The console at 1,280×800 in a real headless Chromium: no view wider than the window, a turn's
steps as a waterfall adding up to the turn's time, readable values (no ``null`` reasons, no
truncation objects, the user, local times, Java step names, hints) and graphs laid out by
Graphviz with labels that do not overlap. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import asyncio
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.conftest import EXAMPLES, REQUIRE_PG
from tests.console.browser import HEIGHT, WIDTH, Browser, console_server
from tests.console.support import console_app
from tests.servers import Server, in_process

LONG = "I'd like a pizza " + "with extra cheese, olives and basil " * 12  # a long message and context value


def fits(page: Any, view: str, shots: Path) -> None:
    """The document is no wider than the window and the header spans it; a screenshot is kept."""
    page.screenshot(path=str(shots / f"console-{view}-1280.png"), full_page=True)
    scroll, inner, header = page.locator("html").evaluate(
        "html => [html.scrollWidth, window.innerWidth, document.querySelector('header').getBoundingClientRect().width]")
    assert scroll <= inner, f"{view}: the page is {scroll} px wide in a {inner} px window"
    assert header >= inner - 1, f"{view}: the header is {header} px wide in a {inner} px window"


def say(page: Any, text: str, replies: int) -> None:
    page.fill("#message", text)
    page.click("#send")
    expect(page.locator(".msg.bot")).to_have_count(replies)


def open_all(page: Any, selector: str) -> None:
    page.locator(selector).evaluate_all("nodes => nodes.forEach(n => { n.open = true; })")


def test_every_view_fits_1280_pixels(page: Any, tmp_path: Path) -> None:
    expect(page.locator("#chat-hint")).to_contain_text("type a message")  # the empty simulator says what to do
    fits(page, "simulator-empty", tmp_path)
    say(page, LONG, 1)
    expect(page.locator("#chat-hint")).to_have_count(0)
    say(page, "large please", 2)
    fits(page, "simulator", tmp_path)
    page.click("#open-sim-conversation")
    expect(page.locator("#turns li")).to_have_count(2)
    open_all(page, "#turn details")
    fits(page, "turn", tmp_path)
    page.click('#turns li[data-turn="1"]')
    expect(page.locator("#turn h3")).to_have_text("Turn 1")
    open_all(page, "#turn details")
    fits(page, "turn-1", tmp_path)
    page.click('.tab[data-tab="conversations"]')
    expect(page.locator("#conversation-list tbody tr").first).to_be_visible()
    fits(page, "conversations", tmp_path)
    page.click('.tab[data-tab="configuration"]')
    expect(page.locator("#state-graph")).to_have_attribute("src", re.compile("^blob:"))
    open_all(page, "#tables details")
    fits(page, "configuration", tmp_path)
    page.click('button.zoom[data-graph="turn-graph"][data-factor="1.5"]')
    expect(page.locator("#turn-graph.zoomed")).to_have_count(1)
    fits(page, "configuration-zoomed", tmp_path)  # a zoomed graph scrolls in its box, not the page


def test_waterfall_adds_up_to_the_turn(page: Any, tmp_path: Path) -> None:
    say(page, "I'd like a pizza", 1)
    page.click("#open-sim-conversation")
    expect(page.locator("#waterfall")).to_be_visible()
    total = float(page.locator("#waterfall").get_attribute("data-total-ms"))
    bars = [float(v) for v in page.locator("#waterfall .wf-bar").evaluate_all("bars => bars.map(b => b.dataset.ms)")]
    assert total > 0 and len(bars) > 10
    assert abs(sum(bars) - total) <= 0.1 * total, (sum(bars), total)
    steps = page.locator("#steps details:not(.skipped) summary").all_inner_texts()
    assert steps and not any(" — 0 ms" in s for s in steps), steps  # sub-millisecond steps keep their time
    assert any("." in s.split(" — ")[1] for s in steps), steps
    page.screenshot(path=str(tmp_path / "console-waterfall-1280.png"), full_page=True)


def test_readable_values(page: Any, server: Server) -> None:
    say(page, LONG, 1)
    page.click("#open-sim-conversation")
    expect(page.locator("#turn h3")).to_have_text("Turn 1")
    skipped = page.locator("#steps details.skipped summary").all_inner_texts()
    assert skipped and not any("null" in s for s in skipped), skipped
    changes = page.locator("#context-changes").inner_text()
    assert "truncated" not in changes and "characters, cut)" in changes, changes
    page.check("#java-names")
    expect(page.locator('details[data-step="schema_extraction"] summary')).to_contain_text("SchemaExtractionStep")
    expect(page.locator("#waterfall")).to_contain_text("SchemaExtractionStep")
    page.uncheck("#java-names")
    expect(page.locator('details[data-step="schema_extraction"] summary')).to_contain_text("schema_extraction —")
    page.click('.tab[data-tab="conversations"]')
    cid = page.locator("#sim-cid").inner_text()
    row = page.locator("#conversation-list tbody tr", has_text=cid)
    expect(row.locator("td").nth(1)).to_have_text("console-tester")
    stamp = row.locator("time")
    iso = stamp.get_attribute("title")
    assert iso and iso.startswith("20") and "T" in iso
    shown = stamp.inner_text()
    assert "T" not in shown and "." not in shown.split(":")[-1], shown  # local, to the second


def test_llm_logging_hint(browser: Browser, tmp_path: Path) -> None:
    """Where prompts are not logged, the header says how to turn logging on."""
    with console_server("sqlite", tmp_path, log_calls=False) as quiet:
        opened: Any = browser.page(WIDTH, HEIGHT)
        try:
            opened.goto(quiet.base + "/console")
            expect(opened.locator("#llm-log-hint")).to_contain_text("CONVENGINE_LLM__LOG_CALLS=true")
            say(opened, "I'd like a pizza", 1)
            opened.click("#open-sim-conversation")
            expect(opened.locator("#llm-calls")).to_contain_text("CONVENGINE_LLM__LOG_CALLS=true")
        finally:
            opened.context.close()


def labels_of(browser: Browser, svg: str) -> list[dict[str, Any]]:
    page: Any = browser.page(WIDTH, HEIGHT)
    try:
        page.set_content(f"<!doctype html><html><body>{svg}</body></html>")
        return list(page.locator("svg text").evaluate_all(
            "texts => texts.map(t => { const r = t.getBoundingClientRect();"
            " return {text: t.textContent, x: r.x, y: r.y, w: r.width, h: r.height}; })"))
    finally:
        page.context.close()


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]:
                found.append((a["text"], b["text"]))
    return found


def test_support_desk_graph_labels_do_not_overlap(browser: Browser, sqlite_db_url: str) -> None:
    if shutil.which("dot") is None:
        message = "no Graphviz dot: run scripts/setup (installs Debian's graphviz package)"
        if REQUIRE_PG:  # CI: scripts/test runs scripts/setup, so a missing dot is a failure
            pytest.fail(message)
        pytest.skip(message)
    async def fetch() -> dict[str, str]:
        async with in_process(console_app(sqlite_db_url, pack=EXAMPLES / "support_desk.yaml")) as client:
            return {name: (await client.get(f"/console/api/config/{name}.svg")).text
                    for name in ("state-graph", "turn-graph")}

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop
        drawn = pool.submit(asyncio.run, fetch()).result()
    for name, svg in drawn.items():
        assert 'data-layout="dot"' in svg, f"{name}: not laid out by Graphviz (is dot installed? scripts/setup)"
        boxes = labels_of(browser, svg)
        assert len(boxes) > 5, name
        assert overlapping(boxes) == [], name
