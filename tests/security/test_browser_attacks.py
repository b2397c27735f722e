"""Issue 34: what a web page on another site can do to a convengine server through a visitor's browser.

- Frame ``/docs`` (Swagger UI, whose Execute sends real requests; on a keyless loopback server every
  caller is an admin) or the console, and trick the visitor into clicking: every response now forbids
  framing (``X-Frame-Options: DENY``, CSP ``frame-ancestors 'none'``) and carries ``nosniff`` and
  ``Referrer-Policy``.
- Send a body-less cross-site ``POST /api/v1/cache/refresh`` (no preflight needed): it ran. State-changing
  requests from an origin the server does not allow are now 403 ``ORIGIN_NOT_ALLOWED``, on keyless and
  keyed servers; requests without ``Origin`` (curl, servers) and from allowed origins keep working.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.auth_support import ADMIN, MESSAGE, assert_refused, auth_env, bearer, new_id
from tests.security.world import assert_unchanged

EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
WIDGET = "http://localhost:5173"
REFRESH = "/api/v1/cache/refresh"


async def test_no_page_can_frame_the_docs_or_the_console(serve: Any) -> None:
    server = serve()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        pages = {path: await client.get(path) for path in ("/docs", "/console", "/health", "/openapi.json",
                                                              "/docs/assets/swagger-ui.css", "/no/such/page")}
        pages["refused"] = await client.post(MESSAGE, json={"inputParams": [1]})
    for path, response in pages.items():
        headers = response.headers
        assert headers.get("x-frame-options") == "DENY", path
        assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), path
        assert headers.get("x-content-type-options") == "nosniff", path
        assert headers.get("referrer-policy") == "no-referrer", path
    assert pages["/docs"].status_code == 200 and "swagger-ui" in pages["/docs"].text
    # the console keeps its own strict policy (no inline or foreign scripts)
    assert "script-src 'self'" in pages["/console"].headers["content-security-policy"]


async def test_a_cross_site_page_cannot_change_a_keyless_server(serve: Any, world: Any) -> None:
    server = serve("--cors-origin", WIDGET)
    cid = new_id()
    before = world()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        refused = [await client.post(REFRESH, headers=EVIL),
                   await client.post(REFRESH, headers={"Origin": "https://evil.example"}),
                   await client.post(REFRESH, headers={"Origin": "null"}),
                   await client.post(REFRESH, headers={"Sec-Fetch-Site": "cross-site"}),
                   await client.post(MESSAGE, json={"message": "hi", "conversationId": cid}, headers=EVIL),
                   await client.post(f"/api/v1/conversation/{cid}/undo", headers=EVIL),
                   await client.patch("/api/v1/versions/draft", json={"upsert": {}}, headers=EVIL)]
        after = world()
        same_origin = await client.post(REFRESH, headers={"Origin": server.base, "Sec-Fetch-Site": "same-origin"})
        curl = await client.post(REFRESH)
        widget = await client.post(MESSAGE, json={"message": "hi"}, headers={"Origin": WIDGET})
        reads = await client.get("/health", headers=EVIL)
    for response in refused:
        assert_refused(response, 403, "ORIGIN_NOT_ALLOWED", "cors")
    assert_unchanged(before, after)
    assert same_origin.status_code == 200 and "Cache refreshed" in same_origin.text
    assert curl.status_code == 200
    assert widget.status_code == 200 and widget.json()["success"]
    assert widget.headers["access-control-allow-origin"] == WIDGET
    assert reads.status_code == 200  # reading is not refused (CORS keeps the page from seeing the answer)


async def test_a_cross_site_page_cannot_use_a_keyed_server_either(serve: Any) -> None:
    """Keys travel in headers a page cannot set on a simple request, but a custom authenticator may read
    cookies: the origin check holds whatever authenticates the caller."""
    server = serve(env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        refused = await client.post(REFRESH, headers={**EVIL, **bearer(ADMIN)})
        allowed = await client.post(REFRESH, headers=bearer(ADMIN))
    assert_refused(refused, 403, "ORIGIN_NOT_ALLOWED")
    assert allowed.status_code == 200
