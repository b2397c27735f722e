"""Versioned configuration over HTTP (admin): draft, diff, simulate, publish refused naming the test,
publish, rollback, channels, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import Request

from convengine.api import Principal, create_app
from tests.helpers import pack
from tests.servers import in_process
from tests.versions.test_versions import WARM, warm_pack, write_tests

MESSAGE = "/api/v1/conversation/message"
VERSIONS = "/api/v1/versions"
CALLERS = {"s-admin": Principal("sso:admin", admin=True), "s-alice": Principal("sso:alice")}
ADMIN = {"X-Session": "s-admin"}
ALICE = {"X-Session": "s-alice"}


def by_session(request: Request) -> Principal | None:
    return CALLERS.get(request.headers.get("x-session", ""))


@asynccontextmanager
async def served(db_url: str, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url, pack=pack(), authenticate=by_session, host="0.0.0.0", **options)
    async with in_process(app) as client:
        yield client


async def say(client: httpx.AsyncClient, text: str, cid: str | None = None, **extra: Any) -> dict[str, Any]:
    body = {"message": text, **({"conversationId": cid} if cid else {}), **extra}
    response = await client.post(MESSAGE, json=body, headers=ALICE)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_the_lifecycle_over_http(db_url: str, tmp_path: Path) -> None:
    async with served(db_url, conversation_tests=[write_tests(tmp_path)]) as client:
        first = await say(client, "hello")
        listed = (await client.get(VERSIONS, headers=ADMIN)).json()
        v1 = next(c["version"] for c in listed["channels"] if c["channel"] == "production")

        drafted = await client.post(f"{VERSIONS}/draft", json={"pack": warm_pack(), "message": "warmer"},
                                    headers=ADMIN)
        assert drafted.status_code == 201 and drafted.json()["author"] == "sso:admin"
        v2 = drafted.json()["version"]
        changes = (await client.get(f"{VERSIONS}/diff", params={"a": v1, "b": v2}, headers=ADMIN)).json()
        assert [t["table"] for t in changes["tables"]] == ["ce_response"]
        assert changes["tables"][0]["changes"][0]["columns"]["exact_text"] == {"before": "Hello there", "after": WARM}
        assert (await client.get(f"{VERSIONS}/{v2}", headers=ADMIN)).json()["pack"]["ce_response"][0][
            "exact_text"] == WARM

        simulated = await client.post(f"{VERSIONS}/simulate", json={"message": "hello"}, headers=ADMIN)
        assert simulated.json()["payload"]["value"] == WARM
        assert (await say(client, "hello"))["payload"]["value"] == "Hello there"

        refused = await client.post(f"{VERSIONS}/publish", json={"message": "try"}, headers=ADMIN)
        assert refused.status_code == 409 and refused.json()["errorCode"] == "PUBLISH_REFUSED"
        assert refused.json()["details"] == [{"failedTest": "greet.conv.yaml: the greeting is kept"}]

        walked = await client.put(f"{VERSIONS}/channels/production", json={"version": v2}, headers=ADMIN)
        assert walked.status_code == 409 and walked.json()["errorCode"] == "GATE_REQUIRED"
        assert f"version {v2}" in walked.json()["message"] and "never passed the publish gate" in walked.json()["message"]
        assert (await say(client, "hello"))["payload"]["value"] == "Hello there"
        forced = await client.put(f"{VERSIONS}/channels/production",
                                  json={"version": v2, "override": "hotfix, tests fixed tomorrow"}, headers=ADMIN)
        assert forced.status_code == 200 and forced.json()["action"] == "OVERRIDE"
        assert (await say(client, "hello"))["payload"]["value"] == WARM
        assert (await say(client, "hello", first["conversationId"]))["payload"]["value"] == "Hello there"

        back = await client.post(f"{VERSIONS}/rollback", json={"version": v1}, headers=ADMIN)
        assert back.status_code == 200 and back.json()["version"]["version"] == v1
        assert (await say(client, "hello"))["payload"]["value"] == "Hello there"
        assert (await client.post(f"{VERSIONS}/rollback", json={"version": 99}, headers=ADMIN)).status_code == 404

        edited = await client.patch(f"{VERSIONS}/draft", json={"delete": {"ce_intent": ["NOPE"]}}, headers=ADMIN)
        assert edited.status_code == 422 and "no row" in edited.json()["message"]
        history = (await client.get(f"{VERSIONS}/history", params={"channel": "production"}, headers=ADMIN)).json()
        assert [h["action"] for h in history][-2:] == ["OVERRIDE", "ROLLBACK"]
        assert history[-2]["author"] == "sso:admin" and history[-2]["message"] == "override: hotfix, tests fixed tomorrow"
