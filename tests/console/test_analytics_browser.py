"""The console's Analytics tab in a real headless Chromium at 1,280×800, over turns generated into the
server's database: its figures, its per-intent and per-state tables and its per-day bars show exactly
the test's own tally of the rows it inserted; nothing is wider than the window; no two labels of a
chart overlap. A screenshot is kept in test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from bench.analytics import Generated, generate, insert
from convengine.db import parse_database_url, upgrade
from tests.analytics.test_generated import tally
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.console.browser import HEIGHT, WIDTH, Browser, screenshot
from tests.console.support import PACK, SCRIPTED
from tests.servers import Server

MARKUP = '<img src="x" id="injected">'


@pytest.fixture(scope="module", params=BACKENDS)
def analytics(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Generated]]:
    folder = tmp_path_factory.mktemp(f"analytics-{request.param}")
    url = f"sqlite:///{folder / 'console.db'}" if request.param == "sqlite" else new_postgres_database()
    upgrade(parse_database_url(url))
    data = generate(3_000, days=20, now=datetime.now(UTC), seed=3)
    data.steps[0]["intent_code"] = MARKUP  # a stored name that is markup: shown as text, never parsed
    insert(url, data)
    server = Server(url, folder / "server.log", "--scripted", str(SCRIPTED), pack=PACK)
    try:
        yield server, data
    finally:
        server.stop()
        if request.param != "sqlite":
            drop_postgres_database(url)


@pytest.fixture
def page(browser: Browser, analytics: tuple[Server, Generated]) -> Iterator[Any]:
    opened: Any = browser.page(WIDTH, HEIGHT)
    opened.goto(analytics[0].base + "/console")
    expect(opened.locator("body[data-ready=true]")).to_have_count(1)
    opened.click('.tab[data-tab="analytics"]')
    expect(opened.locator("#analytics[data-loaded]")).to_have_count(1)
    yield opened
    opened.context.close()


def _int(value: int) -> str:
    return f"{value:,}"


def _rate(part: int, whole: int) -> str:
    return f"{part / whole * 100:.1f}%" if whole else "–"


def test_the_tab_shows_the_tests_own_counts(page: Any, analytics: tuple[Server, Generated], tmp_path: Path) -> None:
    data = analytics[1]
    total = tally(data, ())[()]
    figure = lambda name: page.locator(f'#stats-summary [data-metric="{name}"] .figure-value').inner_text()
    assert figure("conversations") == _int(total["conversations"]) and figure("turns") == _int(total["turns"])
    assert figure("dropped-off") == _int(total["dropped_off"]) and figure("handoffs") == _int(total["handoffs"])
    assert figure("containment") == f"{_rate(total['contained'], total['conversations'])} ({_int(total['contained'])})"
    assert figure("fallback") == f"{_rate(total['fallback_turns'], total['turns'])} ({_int(total['fallback_turns'])})"
    assert figure("feedback") == f"{_int(total['feedback_up'])} / {_int(total['feedback_down'])}"
    assert float(figure("cost")) == pytest.approx(total["estimated_cost"], abs=1e-4)  # shown to 4 places
    for dimension in ("intent", "state"):
        shown = page.locator(f"#stats-by-{dimension} tbody tr").evaluate_all(
            "rows => Object.fromEntries(rows.map(r => [r.dataset.key, Object.fromEntries("
            "[...r.querySelectorAll('td[data-field]')].map(td => [td.dataset.field, td.textContent]))]))")
        for (key,), want in tally(data, (dimension,)).items():
            cells = shown[key]
            assert (cells["turns"], cells["conversations"], cells["droppedOff"], cells["feedbackDown"]) == (
                _int(want["turns"]), _int(want["conversations"]), _int(want["dropped_off"]),
                _int(want["feedback_down"])), key
            assert (cells["inputTokens"], cells["llmCalls"]) == (_int(want["input_tokens"]), _int(want["llm_calls"]))
            assert float(cells["estimatedCost"]) == pytest.approx(want["estimated_cost"], abs=1e-4), key
    assert page.locator("#injected").count() == 0
    assert page.locator("#stats-by-intent td", has_text=MARKUP).count() == 1
    bars = page.locator('svg.chart rect.bar[data-series="turns"]').evaluate_all(
        "rects => rects.map(r => [r.dataset.day, Number(r.dataset.value)])")
    assert dict(bars) == {day: row["turns"] for (day,), row in tally(data, ("day",)).items()}
    screenshot(page, "analytics")


def test_the_tab_fits_1280_pixels_and_chart_labels_do_not_overlap(page: Any) -> None:
    scroll, inner = page.locator("html").evaluate("html => [html.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the Analytics tab is {scroll} px wide in a {inner} px window"
    charts = page.locator("svg.chart")
    assert charts.count() == 6
    for index in range(charts.count()):
        boxes = charts.nth(index).locator("text").evaluate_all(
            "texts => texts.map(t => { const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.top, b.right, b.bottom]; })")
        assert len(boxes) > 5
        for (a, *one), (b, *two) in combinations(boxes, 2):
            apart = one[2] <= two[0] or two[2] <= one[0] or one[3] <= two[1] or two[3] <= one[1]
            assert apart, f"chart {index}: labels {a!r} and {b!r} overlap"
        right = charts.nth(index).evaluate("c => c.getBoundingClientRect().right")
        assert right <= WIDTH
