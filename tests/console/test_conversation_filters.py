"""The conversation list filtered by feedback and by last activity, over HTTP on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from tests.console.support import console_app
from tests.servers import in_process, post

pytestmark = pytest.mark.asyncio


async def listed(client: httpx.AsyncClient, **params: str) -> set[str]:
    response = await client.get("/console/api/conversations", params=params)
    assert response.status_code == 200, response.text
    return {row["conversationId"] for row in response.json()}


async def feedback(client: httpx.AsyncClient, cid: str, kind: str) -> None:
    response = await client.post("/api/v1/conversation/feedback", json={"conversationId": cid, "feedbackType": kind})
    assert response.status_code == 200, response.text


async def test_the_list_filters_by_feedback(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        liked, disliked, changed, silent = [(await post(client, "when are you open?"))["conversationId"]
                                            for _ in range(4)]
        await feedback(client, liked, "THUMBS_UP")
        await feedback(client, disliked, "THUMBS_DOWN")
        await feedback(client, changed, "THUMBS_DOWN")
        await feedback(client, changed, "THUMBS_UP")  # its latest is up, but it was also thumbed down
        assert await listed(client, feedback="THUMBS_DOWN") == {disliked, changed}
        assert await listed(client, feedback="THUMBS_UP") == {liked, changed}
        assert await listed(client, feedback="ANY") == {liked, disliked, changed}
        assert await listed(client, feedback="NONE") == {silent}
        assert await listed(client, feedback="THUMBS_DOWN", q=disliked[:8]) == {disliked}  # with the search
        refused = await client.get("/console/api/conversations", params={"feedback": "MEH"})
    assert refused.status_code == 422 and "feedback" in refused.text


async def test_the_list_filters_by_last_activity(db_url: str) -> None:
    async with in_process(console_app(db_url)) as client:
        old = (await post(client, "when are you open?"))["conversationId"]
        cut = datetime.now(UTC)
        new = (await post(client, "when are you open?"))["conversationId"]
        later = (cut + timedelta(hours=1)).isoformat()
        assert await listed(client, since=cut.isoformat()) == {new}
        assert await listed(client, until=cut.isoformat()) == {old}
        assert await listed(client, since=(cut - timedelta(hours=1)).isoformat(), until=later) == {old, new}
        assert await listed(client, since=later) == set()
        # a new turn makes the old conversation active again
        await post(client, "when are you open?", old)
        assert await listed(client, since=cut.isoformat()) == {old, new}
        # the same instants written in other zones pick the same conversations (times are kept in UTC)
        for zone in (timezone(timedelta(hours=10)), timezone(timedelta(hours=-10))):
            assert await listed(client, until=cut.astimezone(zone).isoformat()) == set()
            assert await listed(client, since=cut.astimezone(zone).isoformat()) == {old, new}
        for bad in ("yesterday", "2026-01-01T10:00:00",  # not a time, or one without a time zone
                    "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):  # no UTC time in years 1-9999
            refused = await client.get("/console/api/conversations", params={"since": bad})
            assert refused.status_code == 422 and "since" in refused.text
