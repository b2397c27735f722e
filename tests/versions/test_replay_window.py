"""A replay's ``since`` / ``until`` mean the same instant whatever zone they are written in (SQLite
keeps activity times as UTC text, so a time at +10:00 was compared as if it were UTC), and a time
with no UTC form is a 422 naming it (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from convengine.api.app import create_app
from convengine.config_loader.companions import pack_options
from tests.api.auth_support import assert_refused, bearer
from tests.console.support import PACK, scripted_model
from tests.security.test_replay_attacks import REPLAY, authenticate, conversation
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
ZONES = (UTC, timezone(timedelta(hours=10)), timezone(timedelta(hours=-10)))


async def test_since_and_until_in_any_zone(db_url: str) -> None:
    app = create_app(db_url, **pack_options(PACK, None), llm=scripted_model(), authenticate=authenticate,
                     settings={"llm": {"log_calls": True}, "api": {"auth": {"conversation_ownership": True}}})
    async with in_process(app) as client:
        before = datetime.now(UTC) - timedelta(minutes=5)
        cid = await conversation(client, "key-a")
        for zone in ZONES:
            at = before.astimezone(zone).isoformat()
            since = await client.post(REPLAY, json={"since": at}, headers=bearer("key-a"))
            until = await client.post(REPLAY, json={"until": at}, headers=bearer("key-a"))
            assert [c["conversationId"] for c in since.json()["replayed"]] == [cid], (zone, since.text)
            assert until.json()["replayed"] == [], (zone, until.text)
        refused = await client.post(REPLAY, json={"since": "9999-12-31T23:59:59-14:00"}, headers=bearer("key-a"))
        assert_refused(refused, 422, "INVALID_INPUT", "since")
