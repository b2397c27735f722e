"""Attacks on the web console: its data endpoints need an admin key, its inputs are bounded, its
assets cannot be used to read other files, and markup in a user message or an LLM reply is shown
as text in a real browser (nothing runs)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import expect

from convengine.console.graphs import Edge, render_svg
from tests.api.auth_support import ADMIN, USER_A, bearer
from tests.console import conftest as console
from tests.console.browser import Browser, screenshot
from tests.console.support import console_app
from tests.servers import Server, in_process, post

browser = console.browser  # the console's browser fixtures: one Chromium, one console server per backend
server = console.server

KEYS = {"api": {"auth": {"api_keys": [USER_A], "admin_keys": [ADMIN]}}}
MARKUP = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def _data_routes(cid: str) -> list[str]:
    return ["/console/api/info", "/console/api/conversations", "/console/api/conversations?q=pizza",
            f"/console/api/conversations/{cid}/turns", f"/console/api/conversations/{cid}/turns/1",
            f"/console/api/conversations/{cid}/export", "/console/api/config",
            "/console/api/config/state-graph.svg", "/console/api/config/turn-graph.svg",
            "/console/api/config/workflows.svg"]


@pytest.mark.asyncio
async def test_console_data_needs_an_admin_key(db_url: str) -> None:
    async with in_process(console_app(db_url, **KEYS)) as client:
        reply = await client.post("/api/v1/conversation/message", json={"message": "I'd like a pizza"},
                                  headers=bearer(USER_A))
        cid = reply.json()["conversationId"]
        for route in _data_routes(cid):
            anonymous = await client.get(route)
            assert anonymous.status_code == 401, (route, anonymous.text)
            wrong = await client.get(route, headers=bearer("not-a-key-0123456789abcdef"))
            assert wrong.status_code == 401, route
            user = await client.get(route, headers=bearer(USER_A))
            assert user.status_code == 403 and user.json()["errorCode"] == "FORBIDDEN", route
            assert cid not in user.text and "ORDER_PIZZA" not in user.text
            assert (await client.get(route, headers=bearer(ADMIN))).status_code == 200, route
        page = await client.get("/console")  # the page is public: it holds no data
        assert page.status_code == 200 and cid not in page.text


@pytest.mark.asyncio
async def test_console_inputs_are_bounded_and_assets_stay_in_the_package(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        cid = (await post(client, "I'd like a pizza"))["conversationId"]
        too_long = await client.get("/console/api/conversations", params={"q": "x" * 201})
        assert too_long.status_code == 422 and "q" in too_long.json()["message"]
        assert (await client.get("/console/api/conversations", params={"limit": 100_000})).status_code == 422
        nul = await client.get("/console/api/conversations", params={"q": "pizza\x00' OR 1=1 --"})
        assert nul.status_code == 422 and "query parameter q contains a NUL" in nul.json()["message"]  # as any field
        quote = await client.get("/console/api/conversations", params={"q": "' OR 1=1 --"})
        assert quote.status_code == 200 and quote.json() == []
        assert (await client.get(f"/console/api/conversations/{cid}/turns/0")).status_code == 404
        assert (await client.get(f"/console/api/conversations/{cid}/turns/99999999999")).status_code == 404
        assert (await client.get("/console/api/conversations/not-a-uuid/turns")).status_code == 422
        for path in ("/console/static/..%2f..%2fapi%2fapp.py", "/console/static/%2e%2e%2f__init__.py",
                     "/docs/assets/..%2f..%2f__init__.py", "/console/static/index.html%00.js",
                     "/docs/assets/swagger-ui.js.map"):
            response = await client.get(path)
            assert response.status_code == 404, (path, response.text[:200])
            assert "import " not in response.text
        # a pack name with YAML in it stays one string: it cannot add tests or keys to the export
        export = await client.get(f"/console/api/conversations/{cid}/export",
                                  params={"pack": "x.yaml\ntests: []\nsettings: {a: 1}"})
        document = yaml.safe_load(export.text)
        assert document["pack"] == "x.yaml\ntests: []\nsettings: {a: 1}"
        assert set(document) == {"pack", "tests"} and len(document["tests"]) == 1


def test_graph_labels_are_escaped() -> None:
    svg = render_svg(['<script>alert(1)</script>', 'A"B'], [Edge('<script>alert(1)</script>', 'A"B', "<b>x</b>")],
                     title="<t>")
    tree = ET.fromstring(svg)
    assert not [e for e in tree.iter() if e.tag.endswith("script") or e.tag.endswith("b")]
    assert "<script>alert(1)</script>" in [e.text for e in tree.iter() if e.tag.endswith("text")]


def test_markup_in_messages_and_llm_replies_renders_as_text(browser: Browser, server: Server) -> None:
    page: Any = browser.page()
    page.goto(server.base + "/console")
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    message = f"I'd like a pizza {MARKUP} inject"
    page.fill("#message", message)
    page.click("#send")
    expect(page.locator(".msg.bot")).to_have_count(1)
    assert page.locator(".msg.user").inner_text() == message
    page.click("#open-sim-conversation")
    expect(page.locator("#turn h3")).to_have_text("Turn 1")
    expect(page.locator("#turns li").first).to_contain_text(MARKUP)
    expect(page.locator("pre.prompt")).to_contain_text(MARKUP)
    expect(page.locator("pre.reply")).to_contain_text("<script>window.__xss=4</script>")
    page.click('.tab[data-tab="conversations"]')
    expect(page.locator("#conversation-list tbody tr")).to_have_count(1)
    assert page.evaluate("() => window.__xss") is None
    assert page.locator("#chat img, #turn img, #turn script, #chat script").count() == 0
    screenshot(page, "xss")
    page.context.close()
    cid = httpx.get(server.base + "/console/api/conversations").json()[0]["conversationId"]
    llm = httpx.get(f"{server.base}/console/api/conversations/{cid}/turns/1").json()["llmCalls"]
    assert "<script>" in llm[0]["reply"]  # the markup really reached the page
    assert browser.outside == []


def test_the_console_page_forbids_inline_and_outside_scripts(server: Server, tmp_path: Path) -> None:
    page = httpx.get(server.base + "/console")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert "<script>" not in page.text  # only the module file, no inline script
