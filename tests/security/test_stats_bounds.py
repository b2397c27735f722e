"""``GET /api/v1/stats`` answers an out-of-range filter with a 422 naming it, never a 500: a time whose
UTC form falls outside the calendar (year 1 at +14:00, year 9999 at -14:00) and a version number no
version can have (larger than the database's integer) are bad input, on both backends."""

from __future__ import annotations

import pytest

from convengine.api import create_app
from tests.analytics.scenario import PACK, scripted_llm
from tests.api.auth_support import ADMIN, USER_A, assert_refused, bearer, start
from tests.servers import in_process

pytestmark = pytest.mark.asyncio
STATS = "/api/v1/stats"
AUTH = {"api": {"auth": {"api_keys": [USER_A], "admin_keys": [ADMIN]}}}
OUT_OF_RANGE = [({"since": "0001-01-01T00:00:00+14:00"}, "since"),
                ({"until": "9999-12-31T23:59:59-14:00"}, "until"),
                ({"version": str(2**31)}, "version"),
                ({"version": str(2**63)}, "version")]


async def test_out_of_range_filters_are_refused_by_name(db_url: str) -> None:
    app = create_app(db_url, pack=PACK, llm=scripted_llm(), host="0.0.0.0", settings=AUTH)
    async with in_process(app) as client:
        await start(client, USER_A, "hello")
        for params, name in OUT_OF_RANGE:
            for key in (USER_A, ADMIN):
                response = await client.get(STATS, params=params, headers=bearer(key))
                assert_refused(response, 422, "INVALID_INPUT", name)
        within = await client.get(STATS, params={"since": "0001-01-02T00:00:00+14:00", "version": str(2**31 - 1)},
                                  headers=bearer(ADMIN))
        assert within.status_code == 200, within.text
        assert within.json()["total"]["conversations"] == 0
