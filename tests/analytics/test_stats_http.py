"""GET /api/v1/stats answers Engine.stats as camelCase JSON: the same numbers as the test's own tally of
the conversations it ran, grouped as asked, and a bad query refused with 422 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from convengine.api import create_app
from convengine.api.auth import key_identity
from tests.analytics.scenario import PACK, assert_rows_equal, numbers, run_script, scripted_llm
from tests.api.auth_support import ADMIN, USER_A, USER_B, bearer
from tests.helpers import engine_on
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
STATS = "/api/v1/stats"
AUTH = {"api": {"auth": {"api_keys": [USER_A, USER_B], "admin_keys": [ADMIN]}}}


async def test_the_endpoint_gives_the_numbers_of_the_callers_conversations(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, PACK, llm=scripted_llm()) as engine:
        seen = await run_script(engine, owner=key_identity(USER_A))
    app = create_app(sqlite_db_url, pack=PACK, llm=scripted_llm(), host="0.0.0.0", settings=AUTH)
    async with in_process(app) as client:
        for key in (USER_A, ADMIN):
            response = await client.get(STATS, params={"by": "intent,state", "idleAfterS": 0.001}, headers=bearer(key))
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["query"]["by"] == ["intent", "state"] and "owner" not in body["query"]
            got = {(r["intent"], r["state"]): numbers(r) for r in body["rows"]}
            assert_rows_equal(got, seen.expected(("intent", "state")))
            assert {"containmentRate", "fallbackRate", "unknownRate", "droppedOff", "estimatedCost"} <= set(body["total"])
        later = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        empty = (await client.get(STATS, params={"since": later}, headers=bearer(ADMIN))).json()
        assert empty["rows"] == [] and empty["total"]["turns"] == 0
        for params, named in (({"by": "week"}, "by"), ({"since": "2025-01-01"}, "since"), ({"idleAfterS": "0"}, "idleAfterS"),
                              ({"intent": "LOAN\x00"}, "intent")):
            refused = await client.get(STATS, params=params, headers=bearer(ADMIN))
            assert refused.status_code == 422 and named in refused.text, refused.text
        assert (await client.get(STATS)).status_code == 401
