"""Attacks on versioned configuration over HTTP: only an admin may read, change, publish or choose a
configuration version; a user's turn cannot pick the draft or a version; bad drafts are refused whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from convengine.catalog.errors import ConversationNotFoundError
from convengine.engine import Engine
from tests.helpers import pack
from tests.versions.test_http import ADMIN, ALICE, VERSIONS, say, served
from tests.versions.test_versions import WARM, live_greeting, versions_of, warm_pack

USER_ROUTES = [
    ("GET", VERSIONS, None),
    ("GET", f"{VERSIONS}/1", None),
    ("GET", f"{VERSIONS}/diff?a=1&b=2", None),
    ("GET", f"{VERSIONS}/history", None),
    ("POST", f"{VERSIONS}/draft", {"pack": warm_pack()}),
    ("PATCH", f"{VERSIONS}/draft", {"delete": {"ce_intent": ["GREETING"]}}),
    ("POST", f"{VERSIONS}/publish", {}),
    ("POST", f"{VERSIONS}/rollback", {"version": 1}),
    ("PUT", f"{VERSIONS}/channels/production", {"version": 2}),
    ("POST", f"{VERSIONS}/simulate", {"message": "hello"}),
    ("POST", f"{VERSIONS}/simulate/start", {}),
]


async def test_a_user_can_neither_change_nor_read_nor_choose_versions(db_url: str) -> None:
    async with served(db_url) as client:
        drafted = await client.post(f"{VERSIONS}/draft", json={"pack": warm_pack()}, headers=ADMIN)
        draft = drafted.json()["version"]
        before = (await client.get(VERSIONS, headers=ADMIN)).json()
        for method, path, body in USER_ROUTES:
            refused = await client.request(method, path, json=body, headers=ALICE)
            assert refused.status_code == 403 and refused.json()["errorCode"] == "FORBIDDEN", (path, refused.text)
            anonymous = await client.request(method, path, json=body)
            assert anonymous.status_code == 401, (path, anonymous.text)
        assert (await client.get(VERSIONS, headers=ADMIN)).json() == before

        # the message endpoint ignores draft/version fields: a user always gets the published version
        for extra in ({"draft": True}, {"version": draft}, {"draft": True, "version": draft}):
            assert (await say(client, "hello", **extra))["payload"]["value"] == "Hello there"
        assert live_greeting(db_url) == "Hello there"
        assert WARM not in str(before)


@pytest.mark.parametrize(("body", "says"), [
    ({"pack": {"ce_conversation": [{"conversation_id": "x"}]}}, "unknown top-level key"),
    ({"pack": {"ce_intent": [{"intent_code": None}]}}, ""),
    ({"pack": {"ce_intent": "DROP TABLE ce_intent"}}, ""),
    ({"pack": {}, "author": "someone else"}, "author"),
])
async def test_a_bad_draft_is_refused_and_nothing_is_stored(db_url: str, body: dict, says: str) -> None:
    async with served(db_url) as client:
        before = (await client.get(VERSIONS, headers=ADMIN)).json()
        refused = await client.post(f"{VERSIONS}/draft", json=body, headers=ADMIN)
        assert refused.status_code == 422, refused.text
        assert says in refused.text
        assert (await client.get(VERSIONS, headers=ADMIN)).json() == before
        assert (await say(client, "hello"))["payload"]["value"] == "Hello there"


async def test_channel_names_and_versions_from_a_request_are_checked(db_url: str, tmp_path: Path) -> None:
    async with served(db_url) as client:
        for name in ("Prod%3B%20DROP", "draft", "x" * 41):
            response = await client.put(f"{VERSIONS}/channels/{name}", json={"version": 1}, headers=ADMIN)
            assert response.status_code == 422, (name, response.text)
        deep: dict = {}
        node = deep
        for _ in range(200):
            node["x"] = {}
            node = node["x"]
        too_deep = await client.post(f"{VERSIONS}/draft", json={"pack": {"settings": deep}}, headers=ADMIN)
        assert too_deep.status_code in (413, 422), too_deep.text
        missing = await client.post(f"{VERSIONS}/simulate", json={"message": "hi", "version": 42}, headers=ADMIN)
        assert missing.status_code == 404 and missing.json()["errorCode"] == "VERSION_NOT_FOUND"
        huge = 2**64  # past any INTEGER column: a clear refusal, never a database error
        for response in (await client.get(f"{VERSIONS}/{huge}", headers=ADMIN),
                         await client.get(f"{VERSIONS}/diff", params={"a": 1, "b": huge}, headers=ADMIN),
                         await client.post(f"{VERSIONS}/rollback", json={"version": huge}, headers=ADMIN),
                         await client.post(f"{VERSIONS}/simulate", json={"message": "hi", "version": huge},
                                           headers=ADMIN)):
            assert response.status_code == 422, response.text
        odd = await client.get(f"{VERSIONS}/history", params={"channel": "x\x00\u00b9"}, headers=ADMIN)
        assert odd.status_code == 422 and "channel" in odd.text, odd.text


def test_another_callers_reset_cannot_move_a_conversation_to_another_version(db_url: str) -> None:
    """A refused turn (another owner's conversation) pins nothing: the pin moves only when a turn commits."""
    with Engine.open(db_url, pack=pack()) as engine:
        cid = engine.process("hello", owner="alice").conversation_id
        v1 = engine.versions.published_version
        engine.versions.draft(warm_pack(), author="ann")
        engine.versions.publish(author="ann")
        with pytest.raises(ConversationNotFoundError):
            engine.process("hello", cid, draft=True, owner="mallory")
        with pytest.raises(ConversationNotFoundError):
            engine.process("hello", cid, reset=True, owner="mallory")
        assert engine.process("hello", cid, owner="alice").text == "Hello there"
        assert versions_of(engine, cid) == [(v1, "channel"), (v1, "pinned")]
