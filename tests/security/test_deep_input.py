"""Item 12: deeply nested inputParams are refused with 422 INVALID_INPUT and nothing is created —
whether the nesting is modest (300 levels: the engine's depth check) or so deep that parsing the
JSON itself would recurse (100,000 levels: the HTTP layer's)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api.auth_support import MESSAGE, assert_refused, new_id
from tests.security.world import assert_unchanged


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = {"a": value}
    return {"a": value}


def _body(cid: str, params: str) -> bytes:
    return f'{{"message": "hello", "conversationId": "{cid}", "inputParams": {params}}}'.encode()


async def test_deeply_nested_input_params_get_422_and_create_nothing(serve: Any, world: Any) -> None:
    server = serve()
    cids = [new_id() for _ in range(4)]
    bodies = [_body(cids[0], json.dumps(_nested(300))),
              _body(cids[1], '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
              _body(cids[2], '{"a": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001),
              _body(cids[3], '{"a": ' + "[" * 100_000)]  # deep and never closed
    before = world()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for body in bodies:
            response = await client.post(MESSAGE, content=body, headers={"content-type": "application/json"})
            assert_refused(response, 422, "INVALID_INPUT", "nests deeper than")
        after = world()
        accepted = await client.post(MESSAGE, content=_body(new_id(), json.dumps(_nested(32))),
                                     headers={"content-type": "application/json"})
    assert_unchanged(before, after)
    assert after.counts["ce_conversation"] == before.counts["ce_conversation"]
    assert accepted.status_code == 200 and accepted.json()["success"]  # the limit itself is allowed
    log = server.log_path.read_text()
    assert "Traceback" not in log and "RecursionError" not in log and "INTERNAL_ERROR" not in log


async def test_the_depth_limit_follows_the_setting(serve: Any, world: Any) -> None:
    server = serve(env={"CONVENGINE_API__MAX_INPUT_DEPTH": "4"})
    before = world()
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        refused = await client.post(MESSAGE, json={"message": "hi", "inputParams": _nested(5)})
        after = world()
        allowed = await client.post(MESSAGE, json={"message": "hi", "inputParams": _nested(4)})
    assert_refused(refused, 422, "INVALID_INPUT", "max_input_depth")
    assert_unchanged(before, after)
    assert allowed.status_code == 200 and allowed.json()["success"]
