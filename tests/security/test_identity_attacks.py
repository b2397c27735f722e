"""A userId belongs to the caller that asserts it: users, their long-term properties, the user routes
and ``forget_user`` are scoped to the API key (or the tenant its keys share). Another key naming the
same userId is another user: it reads nothing of the first and overwrites nothing.

Keys also come from a keys file every worker re-reads: a revoked key is refused within seconds by a
running server, and a tenant mapping change is picked up the same way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from convengine.api import create_app
from convengine.api.auth import key_identity, tenant_identity
from tests.api.auth_support import ADMIN, MESSAGE, USER_A, USER_B, bearer
from tests.helpers import engine_on, pack
from tests.security.world import assert_unchanged
from tests.servers import Server, in_process

pytestmark = pytest.mark.asyncio

TENANT_1 = "acme-key-one-0123456789abcdef"
TENANT_2 = "acme-key-two-0123456789abcdef"
PROPERTIES = "/api/v1/users/properties"
FORGET = "/api/v1/users/forget"

# "... language xx" keeps xx as the user's preferred language (a long-term property); a greeting shows it.
RULES = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "ANY", "state_code": "ANY", "rule_type": "REGEX",
          "match_pattern": r"(?i)\blanguage\s+\w+", "action": "SET_TASK", "action_value": "prefs:language",
          "priority": 1}]
RESPONSES = [{"intent_code": "GREETING", "state_code": "IDLE", "exact_text": "Hello ({{context.language}})",
              "priority": 1}]
MEMORY_PACK = pack(ce_rule=RULES, ce_response=RESPONSES, settings={"conversation_memory": {"long_term": ["language"]}})


def language(task: Any) -> None:
    task.context["language"] = task.user_text.split()[-1]


TASKS = {"prefs": {"language": language}}
AUTH = {"api_keys": [USER_A, USER_B], "admin_keys": [ADMIN], "tenants": {"acme": [TENANT_1, TENANT_2]}}


@asynccontextmanager
async def served(db_url: str, **auth: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url, pack=MEMORY_PACK, tasks=TASKS, host="0.0.0.0",
                     settings={"api": {"auth": {**AUTH, **auth}}})
    async with in_process(app) as client:
        yield client


async def say(client: httpx.AsyncClient, key: str, text: str, cid: str | None = None,
              user: str | None = "alice") -> dict[str, Any]:
    body = {"message": text, **({"conversationId": cid} if cid else {}), **({"userId": user} if user else {})}
    response = await client.post(MESSAGE, json=body, headers=bearer(key))
    assert response.status_code == 200 and response.json()["success"], response.text
    return {**response.json(), "context": json.loads(response.json()["context"])}


async def properties(client: httpx.AsyncClient, key: str, user: str = "alice") -> dict[str, Any]:
    response = await client.get(PROPERTIES, params={"userId": user}, headers=bearer(key))
    assert response.status_code == 200, response.text
    assert response.json()["userId"] == user
    return dict(response.json()["properties"])


async def test_another_key_naming_the_same_user_neither_reads_nor_overwrites_it(db_url: str) -> None:
    async with served(db_url) as client:
        await say(client, USER_A, "hello, language fr")
        stranger = await say(client, USER_B, "hello")
        assert "language" not in stranger["context"] and "fr" not in stranger["payload"]["value"]
        assert await properties(client, USER_B) == {}

        await say(client, USER_B, "hello, language de")  # B's alice is B's own
        again = await say(client, USER_A, "hello")  # A's next conversation still serves A's value
        assert again["context"]["language"] == "fr" and again["payload"]["value"] == "Hello (fr)"
        assert await properties(client, USER_A) == {"language": "fr"}
        assert (await say(client, USER_B, "hello"))["payload"]["value"] == "Hello (de)"
        assert await properties(client, USER_B) == {"language": "de"}
        # a tenant's keys and the admin key are others again
        assert await properties(client, TENANT_1) == {} and await properties(client, ADMIN) == {}
        assert "language" not in (await say(client, ADMIN, "hello"))["context"]


async def test_another_key_forgetting_the_same_user_touches_nothing_of_the_first(db_url: str, world: Any) -> None:
    async with served(db_url) as client:
        mine = [(await say(client, USER_A, "hello, language fr"))["conversationId"],
                (await say(client, USER_A, "a loan please"))["conversationId"]]
        before = world()
        forgot = await client.post(FORGET, json={"userId": "alice", "conversations": True}, headers=bearer(USER_B))
        assert forgot.status_code == 200 and forgot.json() == {"properties": 0, "conversations": 0}
        theirs = (await say(client, USER_B, "hello, language de"))["conversationId"]
        forgot = await client.post(FORGET, json={"userId": "alice", "conversations": True}, headers=bearer(USER_B))
        assert forgot.json() == {"properties": 1, "conversations": 1}
        assert_unchanged(before, world(theirs))
        assert await properties(client, USER_A) == {"language": "fr"}
        for cid in mine:
            audit = await client.get(f"/api/v1/conversation/audit/{cid}", headers=bearer(USER_A))
            assert audit.status_code == 200 and audit.json()
        assert (await say(client, USER_A, "hello"))["payload"]["value"] == "Hello (fr)"
        # and A's own erasure does erase A's alice
        forgot = await client.post(FORGET, json={"userId": "alice"}, headers=bearer(USER_A))
        assert forgot.json() == {"properties": 1, "conversations": 0}
        assert await properties(client, USER_A) == {}


async def test_the_user_routes_check_what_they_are_given(db_url: str) -> None:
    async with served(db_url) as client:
        for bad in ("", " ", "x" * 201, "a\u0000b"):
            refused = await client.get(PROPERTIES, params={"userId": bad}, headers=bearer(USER_A))
            assert refused.status_code == 422 and refused.json()["errorCode"] == "INVALID_INPUT", refused.text
        for body in ({"userId": 42}, {"userId": ["alice"]}, {"userId": "alice", "owner": "key:x"}, {}):
            refused = await client.post(FORGET, json=body, headers=bearer(USER_A))
            assert refused.status_code == 422 and refused.json()["errorCode"] == "INVALID_INPUT", refused.text
        assert (await client.get(PROPERTIES, params={"userId": "alice"})).status_code == 401


async def test_the_keys_of_one_tenant_share_its_users_and_conversations(db_url: str) -> None:
    async with served(db_url) as client:
        first = await say(client, TENANT_1, "hello, language fr")
        shared = await say(client, TENANT_2, "hello")
        assert shared["payload"]["value"] == "Hello (fr)"
        assert await properties(client, TENANT_2) == {"language": "fr"}
        continued = await say(client, TENANT_2, "hello, language es", first["conversationId"])
        assert continued["context"]["language"] == "es"
        assert await properties(client, TENANT_1) == {"language": "es"}
        assert await properties(client, USER_A) == {}
        stolen = await client.post(MESSAGE, json={"message": "hello", "conversationId": first["conversationId"]},
                                   headers=bearer(USER_A))
        assert stolen.status_code == 404


async def test_the_python_api_scopes_users_by_owner(db_url: str) -> None:
    async with engine_on(db_url, MEMORY_PACK, tasks=TASKS) as engine:
        await engine.aprocess("hello, language fr", user_id="alice", owner="app-1")
        await engine.aprocess("hello, language de", user_id="alice")
        assert await engine.aproperties("alice", owner="app-1") == {"language": "fr"}
        assert await engine.aproperties("alice") == {"language": "de"}  # host code's alice, as before
        assert await engine.aproperties("alice", owner="app-2") == {}
        assert (await engine.aforget_user("alice", owner="app-2", conversations=True)) == {"properties": 0,
                                                                                          "conversations": 0}
        assert (await engine.aforget_user("alice", conversations=True)) == {"properties": 1, "conversations": 1}
        assert await engine.aproperties("alice", owner="app-1") == {"language": "fr"}
        assert (await engine.aprocess("hello", user_id="alice", owner="app-1")).payload.value == "Hello (fr)"


# --- keys that change while the server runs ----------------------------------------------


def write_keys(path: Path, **content: Any) -> None:
    """Rewrite the keys file as an operator should: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(yaml.safe_dump(content))
    os.replace(fresh, path)


async def wait_until(check: Any, within_s: float = 6.0) -> float:
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < within_s, "not taken into account in time"
        await _sleep(0.2)
    return time.monotonic() - started


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


@pytest.fixture
def keys_server(db_url: str, tmp_path: Path) -> Any:
    servers: list[Server] = []

    def start(keys: Path) -> Server:
        workers = ("--workers", "2") if db_url.startswith("postgresql") else ()
        env = {"CONVENGINE_API__AUTH__KEYS_FILE": str(keys),
               "CONVENGINE_API__AUTH__API_KEYS": json.dumps([USER_B])}
        server = Server(db_url, tmp_path / "server.log", "--host", "0.0.0.0", *workers, env=env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


async def test_a_key_removed_from_the_keys_file_is_refused_within_seconds(keys_server: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write_keys(keys, api_keys=[USER_A], admin_keys=[ADMIN], tenants={"acme": [TENANT_1]})
    server = keys_server(keys)
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        async def status(key: str) -> int:
            return (await client.post(MESSAGE, json={"message": "hello"}, headers=bearer(key))).status_code

        for key in (USER_A, TENANT_1, ADMIN, USER_B):
            assert await status(key) == 200
        assert await status(TENANT_2) == 401
        write_keys(keys, admin_keys=[ADMIN], tenants={"acme": [TENANT_1, TENANT_2]})

        async def revoked() -> bool:
            return await status(USER_A) == 401

        await wait_until(revoked)
        # every worker has dropped it (each answers some of these), and the new tenant key works
        assert {await status(USER_A) for _ in range(20)} == {401}
        await wait_until(lambda: _is(status(TENANT_2), 200))
        assert {await status(TENANT_2) for _ in range(20)} == {200}
        assert await status(USER_B) == 200  # keys from the environment keep working

        # a half-written file keeps the keys in use rather than locking everyone out
        keys.write_text("tenants: {acme: [")
        await _sleep(2.5)
        assert {await status(TENANT_1) for _ in range(10)} == {200}


async def test_a_tenant_mapping_change_in_the_keys_file_is_picked_up(keys_server: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write_keys(keys, api_keys=[USER_A], tenants={"acme": [TENANT_1]})
    server = keys_server(keys)
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        first = await client.post(MESSAGE, json={"message": "a loan please"}, headers=bearer(TENANT_1))
        cid = first.json()["conversationId"]

        async def reads(key: str) -> int:
            return (await client.post(MESSAGE, json={"message": "hello", "conversationId": cid},
                                      headers=bearer(key))).status_code

        assert await reads(USER_A) == 404
        write_keys(keys, tenants={"acme": [TENANT_1, USER_A]})  # A joins acme: it now acts as acme
        await wait_until(lambda: _is(reads(USER_A), 200))
        assert {await reads(USER_A) for _ in range(10)} == {200}
        write_keys(keys, api_keys=[USER_A], tenants={"acme": [TENANT_1]})  # and leaves it again
        await wait_until(lambda: _is(reads(USER_A), 404))
        assert {await reads(USER_A) for _ in range(10)} == {404}


async def _is(status: Any, expected: int) -> bool:
    return bool(await status == expected)


async def test_identities_are_stable() -> None:
    """Conversations stored before tenants existed keep their owner: a key in no tenant is itself."""
    assert key_identity(USER_A).startswith("key:") and len(key_identity(USER_A)) == 36
    assert tenant_identity("acme") == "tenant:acme"


@pytest.mark.parametrize("content, says", [
    (None, "is not a file"),
    ("api_keys: [", "is not YAML or JSON"),
    ("api_keys: [short-key]", "at least 16 characters"),
    ("root:x:0:0:root:/root:/bin/bash", "must be a mapping"),
    (f"secret_thing: {USER_A}", "a field other than api_keys, admin_keys, chain_keys, tenants"),
    (f"tenants: {{acme: [{TENANT_1}], other: [{TENANT_1}]}}", "a key belongs to one tenant"),
    (f"admin_keys: [{ADMIN}]\ntenants: {{acme: [{ADMIN}]}}", "lists an admin key"),
    (f"tenants: {{'-acme': [{TENANT_1}]}}", "tenant name"),
])
async def test_a_bad_keys_file_refuses_to_serve_saying_why(tmp_path: Path, content: str | None, says: str) -> None:
    from convengine.api.auth import ApiKeys
    from convengine.catalog.errors import ConfigError
    from convengine.settings import AuthSettings

    keys = tmp_path / "keys.yaml"
    if content is not None:
        keys.write_text(content)
    with pytest.raises(ConfigError, match=says) as refused:
        ApiKeys(AuthSettings(keys_file=str(keys)))
    assert "/bin/bash" not in refused.value.message and USER_A not in refused.value.message
