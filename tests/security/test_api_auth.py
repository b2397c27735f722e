"""Item 7: the HTTP API authenticates callers, keeps conversations to their owners, answers only trusted
Host headers, says nothing about the database to strangers, and allows only configured browser origins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from convengine.db import parse_database_url
from tests.api.auth_support import (
    ADMIN,
    MESSAGE,
    USER_A,
    USER_B,
    assert_refused,
    auth_env,
    bearer,
    new_id,
    send,
    start,
)
from tests.conftest import PACKS
from tests.helpers import engine_on
from tests.security.world import assert_unchanged
from tests.servers import free_port

BEYOND_LOOPBACK = ("--host", "0.0.0.0")


def _routes(cid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every conversation and admin route, as (method, path, JSON body)."""
    return [("POST", MESSAGE, {"message": "hello", "conversationId": cid}),
            ("POST", MESSAGE, {"message": "hello", "conversationId": cid, "reset": True}),
            ("GET", f"/api/v1/conversation/audit/{cid}", None),
            ("GET", f"/api/v1/conversation/audit/{cid}/trace", None),
            ("GET", f"/api/v1/conversation/stream/{cid}", None),
            ("POST", "/api/v1/cache/refresh", None),
            ("GET", "/api/v1/cache/analyze", None)]


async def test_requests_without_a_valid_key_get_401_and_change_nothing(serve: Any, world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        cid = await start(client, USER_A)
        before = world()
        for method, path, body in _routes(cid):
            for headers, says in (({}, "authentication required"), (bearer("not-a-key-0123456789"), "not valid"),
                                  ({"X-API-Key": USER_A[:-1]}, "not valid")):
                response = await client.request(method, path, json=body, headers=headers)
                assert_refused(response, 401, "UNAUTHORIZED", says)
                assert response.headers["www-authenticate"] == "Bearer"
        assert_unchanged(before, world())
        # the same key works from either header
        for headers in (bearer(USER_A), {"X-API-Key": USER_A}):
            assert (await client.get(f"/api/v1/conversation/audit/{cid}", headers=headers)).status_code == 200


async def test_another_key_cannot_read_continue_reset_or_stream_a_conversation(serve: Any, world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        victim = await start(client, USER_A)
        assert (await send(client, USER_A, "hello", victim)).json()["intent"] == "GREETING"
        before = world()
        for method, path, body in _routes(victim)[:5]:
            stolen = await client.request(method, path, json=body, headers=bearer(USER_B))
            unknown = new_id()
            if method == "GET" and "audit" in path:
                # reads answer as for a conversation that has not started: nothing tells it exists
                missing = await client.get(path.replace(victim, unknown), headers=bearer(USER_B))
                assert stolen.status_code == missing.status_code == 200
                assert stolen.text.replace(victim, unknown) == missing.text
                assert stolen.json() in ([], {"conversationId": victim, "steps": [], "stages": []})
                continue
            assert_refused(stolen, 404, "CONVERSATION_NOT_FOUND", f"no conversation {victim}")
        after = world()
        audit = (await client.get(f"/api/v1/conversation/audit/{victim}", headers=bearer(USER_A))).json()
    assert_unchanged(before, after)
    assert [json.loads(r["payloadJson"])["text"] for r in audit if r["stage"] == "USER_INPUT"] == ["a loan please", "hello"]


async def test_admin_keys_read_any_conversation_and_only_they_use_the_cache_endpoints(serve: Any,
                                                                                    world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        cid = await start(client, USER_A)
        before = world()
        for method, path in (("POST", "/api/v1/cache/refresh"), ("GET", "/api/v1/cache/analyze")):
            assert_refused(await client.request(method, path, headers=bearer(USER_A)), 403, "FORBIDDEN",
                           "admin key")
        assert_unchanged(before, world())
        assert (await client.post("/api/v1/cache/refresh", headers=bearer(ADMIN))).status_code == 200
        assert (await client.get("/api/v1/cache/analyze", headers=bearer(ADMIN))).status_code == 200
        audit = await client.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(ADMIN))
        trace = await client.get(f"/api/v1/conversation/audit/{cid}/trace", headers=bearer(ADMIN))
    assert audit.status_code == 200 and audit.json()[0]["conversationId"] == cid
    assert trace.status_code == 200 and trace.json()["conversationId"] == cid


async def test_a_conversation_started_by_host_code_is_not_readable_by_a_user_key(serve: Any, db_url: str,
                                                                                 world: Any) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    async with engine_on(db_url, None) as engine:
        cid = (await engine.aprocess("a loan please")).conversation_id
    before = world()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for key in (USER_A, USER_B):
            hidden = await client.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(key))
            assert (hidden.status_code, hidden.json()) == (200, [])  # what a conversation not started shows
            assert_refused(await send(client, key, "hello", cid), 404, "CONVERSATION_NOT_FOUND")
        assert_unchanged(before, world())
        assert (await client.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(ADMIN))).status_code == 200


def test_health_says_ok_and_the_config_version_only(serve: Any, db_url: str) -> None:
    server = serve(*BEYOND_LOOPBACK, env=auth_env())
    response = httpx.get(server.base + "/health", timeout=10)
    assert response.status_code == 200
    assert set(response.json()) == {"status", "configVersion"} and response.json()["status"] == "ok"
    url = parse_database_url(db_url).sync_url
    for detail in (url.username, url.host, url.database, "sqlite", "postgres"):
        if detail:
            assert str(detail) not in response.text, detail


def _serve_command(db_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "convengine.cli", "serve", "--url", db_url, "--port", str(free_port()),
            "--llm", "none", "--pack", str(PACKS / "api_pack.yaml"), *extra]


def test_serving_beyond_loopback_without_keys_refuses_to_start(db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVENGINE_API__")}
    done = subprocess.run(_serve_command(db_url, *BEYOND_LOOPBACK), capture_output=True, text=True, timeout=60, check=False,
                          env=env)
    assert done.returncode == 2  # the CLI's exit code for a configuration it cannot start with
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "refusing to serve on 0.0.0.0 without authentication" in lines[0]
    assert "CONVENGINE_API__AUTH__API_KEYS" in lines[0] and "CONVENGINE_API__AUTH__MODE=off" in lines[0]
    short = subprocess.run(_serve_command(db_url, *BEYOND_LOOPBACK), capture_output=True, text=True, timeout=60, check=False,
                           env={**env, "CONVENGINE_API__AUTH__API_KEYS": '["short"]'})
    assert short.returncode == 2 and "at least 16 characters" in short.stderr
    assert "short" not in short.stderr  # a key is never shown


async def test_turning_authentication_off_beyond_loopback_is_logged(serve: Any, tmp_path: Path) -> None:
    server = serve(*BEYOND_LOOPBACK, env={"CONVENGINE_API__AUTH__MODE": "off"})
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        assert (await send(client, None, "hello")).status_code == 200
    assert "authentication is OFF (api.auth.mode=off) while serving on 0.0.0.0" in server.log_path.read_text()


async def test_a_foreign_host_header_is_refused(serve: Any, world: Any) -> None:
    """DNS rebinding: a web page's request reaches a local server with the page's host name."""
    loopback = serve()
    trusted = serve(*BEYOND_LOOPBACK, env=auth_env(CONVENGINE_API__TRUSTED_HOSTS='["api.example.com", "127.0.0.1"]'))
    cid = new_id()
    before = world()
    for server, key in ((loopback, None), (trusted, USER_A)):
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            for host in ("evil.example", f"evil.example:{server.port}", "localhost.evil.example", "a@localhost"):
                response = await client.post(MESSAGE, json={"message": "hello", "conversationId": cid},
                                             headers={**bearer(key), "Host": host})
                assert_refused(response, 400, "HOST_NOT_ALLOWED", "settings api.trusted_hosts")
            assert_refused(await client.get("/health", headers={"Host": "evil.example"}), 400, "HOST_NOT_ALLOWED")
    assert_unchanged(before, world())
    async with httpx.AsyncClient(base_url=loopback.base, timeout=30) as client:
        for host in (f"localhost:{loopback.port}", f"127.0.0.1:{loopback.port}", "[::1]"):
            assert (await client.get("/health", headers={"Host": host})).status_code == 200
    async with httpx.AsyncClient(base_url=trusted.base, timeout=30) as client:
        response = await client.post(MESSAGE, json={"message": "hello"}, headers={**bearer(USER_A),
                                                                                  "Host": "api.example.com"})
        assert response.status_code == 200


async def test_browsers_may_call_from_configured_origins_only(serve: Any) -> None:
    widget, admin_ui = "http://localhost:5173", "https://admin.example.com"
    server = serve(*BEYOND_LOOPBACK, "--cors-origin", widget,
                   env=auth_env(CONVENGINE_API__CORS__ALLOWED_ORIGINS=f'["{admin_ui}"]'))
    plain = serve()
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, x-api-key, content-type"}
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for origin in (widget, admin_ui):
            response = await client.options(MESSAGE, headers={"Origin": origin, **preflight})
            assert response.status_code == 200 and response.headers["access-control-allow-origin"] == origin
            allowed = response.headers["access-control-allow-headers"].lower()
            assert {"authorization", "x-api-key", "content-type"} <= set(allowed.replace(" ", "").split(","))
        foreign = await client.options(MESSAGE, headers={"Origin": "https://evil.example", **preflight})
        assert foreign.status_code == 400 and "access-control-allow-origin" not in foreign.headers
        cid = await start(client, USER_A)
        unauthorized = await client.get(f"/api/v1/conversation/audit/{cid}", headers={"Origin": widget})
        assert unauthorized.status_code == 401 and unauthorized.headers["access-control-allow-origin"] == widget
        async with client.stream("GET", f"/api/v1/conversation/stream/{cid}",
                                 headers={"Origin": widget, **bearer(USER_A)}) as stream:
            assert stream.status_code == 200 and stream.headers["access-control-allow-origin"] == widget
    async with httpx.AsyncClient(base_url=plain.base, timeout=30) as client:
        response = await client.options(MESSAGE, headers={"Origin": widget, **preflight})
        assert "access-control-allow-origin" not in response.headers
