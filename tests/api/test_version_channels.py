"""Channels over HTTP, on SQLite and PostgreSQL: a channel made gated shows it and is gated like
production; staging takes drafts; the OpenAPI schema declares the new fields."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from convengine.api.app import create_app
from tests.api.auth_support import ADMIN, USER_A, bearer
from tests.helpers import pack
from tests.versions.test_versions import warm_pack

VERSIONS = "/api/v1/versions"


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    keys = {"api": {"auth": {"api_keys": [USER_A], "admin_keys": [ADMIN]}}}
    with TestClient(create_app(db_url, pack=pack(), settings=keys), base_url="http://127.0.0.1",
                    raise_server_exceptions=False) as served:
        yield served


def channels(client: TestClient) -> dict[str, dict]:
    return {c["channel"]: c for c in client.get(VERSIONS, headers=bearer(ADMIN)).json()["channels"]}


def test_a_gated_channel_over_http(client: TestClient) -> None:
    admin = bearer(ADMIN)
    v1 = channels(client)["production"]["version"]
    assert channels(client)["production"]["gated"] is True
    assert client.put(f"{VERSIONS}/channels/canary", json={"version": v1, "gated": True}, headers=admin).status_code == 200
    draft = client.post(f"{VERSIONS}/draft", json={"pack": warm_pack()}, headers=admin).json()["version"]
    assert client.put(f"{VERSIONS}/channels/staging", json={"version": draft}, headers=admin).status_code == 200
    refused = client.put(f"{VERSIONS}/channels/canary", json={"version": draft}, headers=admin)
    assert refused.status_code == 409 and refused.json()["errorCode"] == "GATE_REQUIRED"
    assert "'canary'" in refused.json()["message"]
    listed = channels(client)
    assert listed["canary"] == {**listed["canary"], "version": v1, "gated": True}
    assert listed["staging"]["version"] == draft and listed["staging"]["gated"] is False
    published = client.post(f"{VERSIONS}/publish", json={"channel": "canary", "draft": draft}, headers=admin)
    assert published.status_code == 200, published.text
    promoted = client.put(f"{VERSIONS}/channels/production", json={"version": draft}, headers=admin)
    assert promoted.status_code == 200 and promoted.json()["action"] == "POINT"


def test_the_openapi_schema_declares_the_gate_fields(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"draft", "version", "channel"} <= set(schemas["PublishBody"]["properties"])
    assert {"override", "gated", "migration"} <= set(schemas["ChannelBody"]["properties"])
