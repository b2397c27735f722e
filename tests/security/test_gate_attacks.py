"""Walking around the publish gate over HTTP, with an admin key and with a user key: after a refused
publish, no route (pointing production, by number or through staging; changing its migration policy
at the same time; ungating it; rolling it back; publishing the version by number; publishing to
staging first) makes users get the untested draft; only an admin's override with a reason does, and
the channel's history keeps who and why. A user key changes nothing at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convengine.api.app import create_app
from convengine.api.auth import key_identity
from tests.api.auth_support import ADMIN, MESSAGE, USER_A, bearer
from tests.helpers import pack
from tests.versions.test_versions import WARM, warm_pack, write_tests

VERSIONS = "/api/v1/versions"
ADMIN_2 = "admin-two-key-0123456789abcdef"


@pytest.fixture
def client(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    keys = {"api": {"auth": {"api_keys": [USER_A], "admin_keys": [ADMIN, ADMIN_2]}}}
    app = create_app(db_url, pack=pack(), settings=keys, conversation_tests=[write_tests(tmp_path)])
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as served:
        yield served


def greeting(client: TestClient) -> str:
    response = client.post(MESSAGE, json={"message": "hello"}, headers=bearer(USER_A))
    assert response.status_code == 200, response.text
    return str(response.json()["payload"]["value"])


def production(client: TestClient) -> dict[str, Any]:
    listed = client.get(VERSIONS, headers=bearer(ADMIN)).json()
    return next(c for c in listed["channels"] if c["channel"] == "production")


def test_the_gate_cannot_be_walked_around_over_http(client: TestClient) -> None:
    admin = bearer(ADMIN)
    v1 = production(client)["version"]
    v2 = client.post(f"{VERSIONS}/draft", json={"pack": warm_pack()}, headers=admin).json()["version"]
    refused = client.post(f"{VERSIONS}/publish", json={}, headers=admin)
    assert refused.status_code == 409 and refused.json()["errorCode"] == "PUBLISH_REFUSED"
    history = client.get(f"{VERSIONS}/history", params={"channel": "production"}, headers=admin).json()

    assert client.put(f"{VERSIONS}/channels/staging", json={"version": v2}, headers=admin).status_code == 200
    staged = client.get(VERSIONS, headers=admin).json()["channels"]
    assert {c["channel"]: c["version"] for c in staged}["staging"] == v2  # staging takes drafts freely
    walks = [
        ("PUT", "channels/production", {"version": v2}, 409, "GATE_REQUIRED"),
        ("PUT", "channels/production", {"version": v2, "migration": "latest"}, 409, "GATE_REQUIRED"),
        ("PUT", "channels/production", {"version": v2, "gated": False}, 422, "INVALID_INPUT"),
        ("PUT", "channels/production", {"version": v2, "override": ""}, 422, None),
        ("POST", "rollback", {"version": v2}, 404, "VERSION_NOT_FOUND"),
        ("POST", "publish", {"version": v2}, 409, "PUBLISH_REFUSED"),
        ("POST", "publish", {"channel": "staging"}, 409, "PUBLISH_REFUSED"),
        ("POST", "publish", {"draft": v2, "channel": "canary"}, 409, "PUBLISH_REFUSED"),
    ]
    for method, path, body, status, code in walks:
        response = client.request(method, f"{VERSIONS}/{path}", json=body, headers=admin)
        assert response.status_code == status, (path, body, response.text)
        if code is not None:
            assert response.json()["errorCode"] == code, (path, body, response.text)
        if code == "GATE_REQUIRED":
            assert response.json()["details"] == [{"channel": "production", "version": v2,
                                                   "reason": response.json()["details"][0]["reason"]}]
            assert f"version {v2}" in response.json()["message"]
        assert production(client)["version"] == v1 and greeting(client) == "Hello there", (path, body)
    assert client.get(f"{VERSIONS}/history", params={"channel": "production"}, headers=admin).json() == history

    for method, path, body in [("PUT", "channels/production", {"version": v2, "override": "I say so"}),
                               ("PUT", "channels/canary", {"version": v2, "gated": False}),
                               ("POST", "publish", {"draft": v2})]:
        forbidden = client.request(method, f"{VERSIONS}/{path}", json=body, headers=bearer(USER_A))
        assert forbidden.status_code == 403 and forbidden.json()["errorCode"] == "FORBIDDEN"
    assert production(client)["version"] == v1 and greeting(client) == "Hello there"

    forced = client.put(f"{VERSIONS}/channels/production", json={"version": v2, "override": "outage: ship it"},
                        headers=admin)
    assert forced.status_code == 200 and forced.json()["action"] == "OVERRIDE"
    assert greeting(client) == WARM
    last = client.get(f"{VERSIONS}/history", params={"channel": "production"}, headers=admin).json()[-1]
    assert last["action"] == "OVERRIDE" and last["author"] == key_identity(ADMIN)
    assert last["message"] == "override: outage: ship it"


def test_one_admin_cannot_publish_another_admins_draft_without_naming_it(client: TestClient) -> None:
    mine = client.post(f"{VERSIONS}/draft", json={"pack": warm_pack("Hi from one")}, headers=bearer(ADMIN))
    theirs = client.patch(f"{VERSIONS}/draft", json={"upsert": {"ce_response": [
        {"response_id": 1, "exact_text": "Hello there"}]}}, headers=bearer(ADMIN_2))
    assert theirs.status_code == 200, theirs.text
    draft = theirs.json()["version"]
    unnamed = client.post(f"{VERSIONS}/publish", json={}, headers=bearer(ADMIN))
    assert unnamed.status_code == 409 and unnamed.json()["errorCode"] == "DRAFT_NOT_NAMED"
    assert key_identity(ADMIN_2) in unnamed.json()["message"] and f"version {draft}" in unnamed.json()["message"]
    stale = client.post(f"{VERSIONS}/publish", json={"draft": mine.json()["version"]}, headers=bearer(ADMIN))
    assert stale.status_code == 409 and stale.json()["errorCode"] == "DRAFT_NOT_NAMED"
    assert f"the draft is version {draft}" in stale.json()["message"]
    assert greeting(client) == "Hello there" and production(client)["version"] < mine.json()["version"]
    named = client.post(f"{VERSIONS}/publish", json={"draft": draft}, headers=bearer(ADMIN))
    assert named.status_code == 200 and named.json()["version"]["version"] == draft
