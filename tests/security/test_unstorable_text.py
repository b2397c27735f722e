"""Issue 34: a NUL character or a lone surrogate in any field of any request is a 422 naming the field,
the same on SQLite and PostgreSQL, with nothing recorded and nothing of the caller's data in the log.

Before: a NUL in ``inputParams`` was ``DATABASE_UNAVAILABLE``, ``recoverable: true`` on PostgreSQL (a
client retries forever) and the log printed the SQL with its parameters; SQLite stored it. A lone
surrogate failed the turn with ``PIPELINE_STEP_FAILED`` from ``audit_user_input``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from convengine.catalog.errors import InvalidInputError
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from tests.api.auth_support import MESSAGE, assert_refused, new_id
from tests.conftest import PACKS
from tests.security.world import assert_unchanged

MARK = "caller-data-7c1f"
"""Sent next to every bad character: it must never reach the server's log."""
NUL, SURROGATE = "\x00", "\ud800"


def _raw(body: dict[str, Any]) -> bytes:
    """JSON as a client may send it (json.dumps escapes the lone surrogate as \\ud800)."""
    return json.dumps(body).encode()


def _message_bodies(bad: str) -> list[tuple[dict[str, Any], str]]:
    """(body, the field the refusal must name) for every field of a turn."""
    cid = new_id()
    return [({"message": "hi", "conversationId": cid, "inputParams": {"a": f"{MARK}{bad}"}}, "inputParams.a"),
            ({"message": "hi", "conversationId": cid, "inputParams": {f"k{bad}": MARK}}, "inputParams key k?"),
            ({"message": "hi", "conversationId": cid, "inputParams": {"a": {"b": [MARK, f"x{bad}"]}}},
             "inputParams.a.b[1]"),
            ({"message": f"{MARK}{bad}", "conversationId": cid}, "message"),
            ({"message": "hi", "conversationId": cid, "userId": f"{MARK}{bad}"}, "userId"),
            ({"message": "hi", "conversationId": f"{cid}{bad}"}, "conversationId")]


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
async def test_every_field_of_every_body_refuses_unstorable_text(serve: Any, world: Any, bad: str) -> None:
    server = serve("--log-level", "info")  # serve's default level: request lines are logged, bodies never
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        started = await client.post(MESSAGE, json={"message": "hi"})
        cid = started.json()["conversationId"]
        before = world(attacker=[cid])
        requests = [("POST", MESSAGE, body, field) for body, field in _message_bodies(bad)]
        requests += [("POST", "/api/v1/conversation/feedback",
                      {"conversationId": cid, "feedbackType": "THUMBS_UP", key: value}, field)
                     for key, value, field in (("messageId", f"{MARK}{bad}", "messageId"),
                                               ("assistantResponse", f"{MARK}{bad}", "assistantResponse"),
                                               ("metadata", {"n": f"{MARK}{bad}"}, "metadata.n"))]
        requests += [("POST", "/api/v1/versions/draft", {"pack": {"ce_intent": [{"intent_code": f"A{bad}"}]},
                                                         "message": MARK}, "pack.ce_intent[0].intent_code"),
                     ("PATCH", "/api/v1/versions/draft", {"upsert": {}, "message": f"{MARK}{bad}"}, "message")]
        for method, path, body, field in requests:
            response = await client.request(method, path, content=_raw(body),
                                             headers={"content-type": "application/json"})
            assert_refused(response, 422, "INVALID_INPUT", field)
        assert_refused(await client.get("/console/api/conversations?q=pizza%00"), 422, "INVALID_INPUT", "q contains a NUL")
        assert_refused(await client.get(f"/api/v1/conversation/{cid}%00/steps"), 422, "INVALID_CONVERSATION_ID")
        after = world(attacker=[cid])
    assert_unchanged(before, after)
    assert after.own == before.own  # not even the attacker's own conversation changed
    log = server.log_path.read_text()
    assert MARK not in log and "[parameters:" not in log and "Traceback" not in log, log


def test_the_python_api_refuses_the_same(db_url: str, world: Any) -> None:
    with Engine.open(db_url, pack=PACKS / "api_pack.yaml") as engine:
        before = world()
        for params, field in (({"a": f"x{NUL}"}, "input_params.a"), ({"a": [SURROGATE]}, "input_params.a[0]"),
                              ({f"k{NUL}": 1}, "input_params key k?")):
            with pytest.raises(InvalidInputError, match=re.escape(field)):
                engine.process("hi", input_params=params)
        with pytest.raises(InvalidInputError, match="user_id"):
            engine.process("hi", user_id=f"u{NUL}")
        with pytest.raises(InvalidInputError, match="message"):
            engine.process(f"hi{SURROGATE}")
        assert_unchanged(before, world())


def test_database_errors_never_carry_statement_parameters(db_url: str) -> None:
    """A failed statement's error (what a log line prints) names the SQL, never the values bound to it."""
    url = parse_database_url(db_url)
    sync = create_sync_engine(url)
    try:
        with sync.connect() as conn, pytest.raises(sa.exc.DBAPIError) as failed:
            conn.execute(sa.text("SELECT no_such_column FROM ce_intent WHERE intent_code = :code"), {"code": MARK})
    finally:
        sync.dispose()
    assert MARK not in str(failed.value) and "parameters hidden" in str(failed.value)
