"""Analytics are scoped like every conversation read: with API keys, ``GET /api/v1/stats`` counts only
the caller's own conversations (turns, feedback, model calls, outcomes); key B learns nothing of key
A's conversations, not even how many there are, and a filter naming A's intent finds nothing."""

from __future__ import annotations

import pytest

from convengine.api import create_app
from tests.analytics.scenario import PACK, scripted_llm
from tests.api.auth_support import ADMIN, USER_A, USER_B, bearer, start
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
STATS = "/api/v1/stats"
AUTH = {"api": {"auth": {"api_keys": [USER_A, USER_B], "admin_keys": [ADMIN]}}}


async def _total(client: object, key: str, **params: str) -> dict[str, object]:
    response = await client.get(STATS, params=params, headers=bearer(key))  # type: ignore[attr-defined]
    assert response.status_code == 200, response.text
    return dict(response.json()["total"])


async def test_key_b_sees_none_of_key_as_conversations(db_url: str) -> None:
    app = create_app(db_url, pack=PACK, llm=scripted_llm(), host="0.0.0.0", settings=AUTH)
    async with in_process(app) as client:
        for text in ("I want a loan", "hello", "blah blah"):
            cid = await start(client, USER_A, text)
            assert (await client.post("/api/v1/conversation/feedback",
                                      json={"conversationId": cid, "feedbackType": "THUMBS_DOWN"},
                                      headers=bearer(USER_A))).status_code == 200
        await start(client, USER_B, "hello")
        mine, theirs, everyone = [await _total(client, k) for k in (USER_B, USER_A, ADMIN)]
        assert (mine["conversations"], mine["turns"], mine["feedbackDown"], mine["llmCalls"]) == (1, 1, 0, 0)
        assert (theirs["conversations"], theirs["turns"], theirs["feedbackDown"]) == (3, 3, 3)
        assert theirs["llmCalls"] > 0
        assert everyone["conversations"] == 4 and everyone["turns"] == 4
        assert (await _total(client, USER_B, intent="LOAN"))["turns"] == 0
        by_intent = (await client.get(STATS, params={"by": "intent"}, headers=bearer(USER_B))).json()["rows"]
        assert [row["intent"] for row in by_intent] == ["GREETING"]
