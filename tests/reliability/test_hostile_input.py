"""Hostile configuration and input: catastrophic patterns finish, bad requests change nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convengine.catalog.errors import InvalidInputError, MessageTooLargeError
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.servers import Server, post

pytestmark = pytest.mark.asyncio

LONG = "a" * 20_000 + "!"
# RE2 runs the first of each pair in linear time; the second needs a look-around or a
# back-reference, so it falls back to the `regex` module and its per-call time bound.
HOSTILE_PACK = pack(
    ce_policy=[{"policy_id": 1, "rule_type": "REGEX", "pattern": r"^(a+)+$", "response_text": "blocked 1"},
               {"policy_id": 2, "rule_type": "REGEX", "pattern": r"^(a+)+(?=b)", "response_text": "blocked 2"}],
    ce_intent_classifier=[
        {"classifier_id": 11, "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
         "pattern": r"(x+x+)+y", "priority": 5},
        {"classifier_id": 12, "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
         "pattern": r"^(a|aa)+\1$", "priority": 6}],
    ce_rule=[{"rule_id": 21, "phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY",
              "rule_type": "REGEX", "match_pattern": r"^(\w+\s?)*(?!x)\d", "action": "SET_STATE",
              "action_value": "HIJACKED"},
             {"rule_id": 22, "phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY",
              "rule_type": "REGEX", "match_pattern": r"(\w+\s?)*\d$", "action": "SET_STATE",
              "action_value": "HIJACKED"}],
    ce_response=[{"intent_code": "ANY", "state_code": "HIJACKED", "exact_text": "a hostile rule matched"}],
)


@pytest.mark.timeout(120)  # liveness: an unbounded backtracking engine would not finish for ages
async def test_catastrophic_patterns_against_long_input_finish_and_are_audited(db_url: str) -> None:
    async with engine_on(db_url, HOSTILE_PACK) as engine:
        result = await engine.aprocess(LONG)
        assert (result.intent, result.state) == ("UNKNOWN", "UNKNOWN")  # nothing matched, nothing blocked
        events = await turn_events(engine, result.conversation_id)
        assert payload_of(events, "POLICY_PATTERN_TIMEOUT")["policyId"] == 2
        assert payload_of(events, "INTENT_CLASSIFIER_PATTERN_TIMEOUT")["classifierId"] == 12
        timed_out = [e.payload for e in events if e.stage.startswith("RULE_NO_MATCH")
                     and e.payload.get("reason") == "PATTERN_TIMEOUT"]
        assert [p["ruleId"] for p in timed_out] == [21]
        assert "20001-character input" in timed_out[0]["error"]

        # the same rows still work on ordinary input
        loan = await engine.aprocess("xxy", result.conversation_id)
        assert loan.intent == "LOAN"


# --- bad requests over HTTP ------------------------------------------------------------------

BAD_BODIES: list[tuple[Any, int, str, str]] = [
    ({"message": "x" * 1_000_000}, 413, "MESSAGE_TOO_LARGE", "the limit is 100000"),
    ({"message": "\u0000\u0001\u0002binary"}, 422, "INVALID_INPUT", "NUL character"),
    ({"message": "\ud800 lone surrogate"}, 422, "INVALID_INPUT", "not valid Unicode text"),
    (b'{"message": "caf\xe9"}', 422, "INVALID_INPUT", "not valid UTF-8"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", 422, "INVALID_INPUT", "not valid UTF-8 JSON"),
    (b"\x00\x01binary\x02", 422, "INVALID_INPUT", "not valid UTF-8 JSON"),
    (b"{not json at all", 422, "INVALID_INPUT", "not valid JSON: Expecting property name"),
    ({"message": "hi", "inputParams": [1, 2]}, 422, "INVALID_INPUT", "body.inputParams"),
    ({"message": "hi", "inputParams": "x=1"}, 422, "INVALID_INPUT", "body.inputParams"),
    ({"message": "hi", "inputParams": 7}, 422, "INVALID_INPUT", "body.inputParams"),
    (b'{"message": "hi", "inputParams": {"a": NaN}}', 422, "INVALID_INPUT", "input_params must be JSON values"),
    ([{"message": "hi"}], 422, "INVALID_INPUT", "valid dictionary"),
]


def encode(body: Any, cid: str) -> bytes:
    if isinstance(body, bytes):
        return body.replace(b'{"message"', b'{"conversationId": "%s", "message"' % cid.encode(), 1)
    if isinstance(body, dict):
        body = {**body, "conversationId": cid}
    return json.dumps(body).encode("utf-8", "surrogatepass")


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    running = Server(db_url, tmp_path / "server.log")
    yield running
    running.stop()


async def footprint(client: httpx.AsyncClient, cid: str) -> tuple[int, list[str]]:
    audit = (await client.get(f"/api/v1/conversation/audit/{cid}")).json()
    return len(audit), [json.loads(row["payloadJson"])["text"] for row in audit if row["stage"] == "USER_INPUT"]


async def test_bad_requests_get_clear_errors_and_leave_the_conversation_untouched(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        cid = str(uuid.uuid4())
        await post(client, "loan please", cid)
        before = await footprint(client, cid)
        for body, status, code, text in BAD_BODIES:
            response = await client.post("/api/v1/conversation/message", content=encode(body, cid),
                                         headers={"content-type": "application/json"})
            shown = repr(body)[:60]
            assert response.status_code == status, (shown, response.text)
            error = response.json()
            assert error["errorCode"] == code and text in error["message"], (shown, error)
        assert await footprint(client, cid) == before
        reply = await post(client, "hello", cid)  # and the conversation carries on
        assert (reply["intent"], reply["state"]) == ("GREETING", "IDLE")


async def test_bad_requests_for_new_conversations_create_nothing(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=60) as client:
        for body, status, _, _ in BAD_BODIES:
            cid = str(uuid.uuid4())
            response = await client.post("/api/v1/conversation/message", content=encode(body, cid),
                                         headers={"content-type": "application/json"})
            assert response.status_code == status
            assert (await client.get(f"/api/v1/conversation/audit/{cid}")).json() == []
            missing = await client.post("/api/v1/conversation/feedback",  # needs the conversation's row
                                        json={"conversationId": cid, "feedbackType": "THUMBS_UP"})
            assert missing.status_code == 404 and missing.json()["errorCode"] == "CONVERSATION_NOT_FOUND"


MALFORMED_IDS = ["not-a-uuid", "'; DROP TABLE ce_audit; --", "00000000-0000-0000-0000-00000000000g", "x" * 5000,
                 "%00", "..%2F..%2Fetc%2Fpasswd"]
ID_PATHS = ["/api/v1/conversation/audit/{}", "/api/v1/conversation/audit/{}/trace", "/api/v1/conversation/stream/{}"]


async def test_malformed_conversation_ids_are_refused(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for cid in MALFORMED_IDS:
            for path in ID_PATHS:
                response = await client.get(path.format(cid))
                assert response.status_code in (404, 422), (cid, path, response.text)
                assert response.json()["errorCode"] in ("INVALID_CONVERSATION_ID", "NOT_FOUND"), (cid, path)
            response = await client.post("/api/v1/conversation/message", json={"message": "hi", "conversationId": cid})
            assert response.status_code == 422, (cid, response.text)
            assert response.json()["errorCode"] == "INVALID_CONVERSATION_ID"
            assert "is not a UUID" in response.json()["message"]


# --- bad calls through the Python API ----------------------------------------------------------

PY_BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"message": "x" * 1_000_000}, MessageTooLargeError, "the limit is 100000"),
    ({"message": b"caf\xc3\xa9"}, InvalidInputError, "got bytes"),
    ({"message": "caf\udce9"}, InvalidInputError, "not valid Unicode text"),
    ({"message": None}, InvalidInputError, "got NoneType"),
    ({"message": "hi", "input_params": [("a", 1)]}, InvalidInputError, "must be an object"),
    ({"message": "hi", "input_params": "a=1"}, InvalidInputError, "must be an object"),
    ({"message": "hi", "input_params": {1: "a"}}, InvalidInputError, "keys must be strings"),
    ({"message": "hi", "input_params": {"a": object()}}, InvalidInputError, "must be JSON values"),
    ({"message": "hi", "input_params": {"a": float("inf")}}, InvalidInputError, "must be JSON values"),
    ({"message": "hi", "reset": "yes"}, InvalidInputError, "reset must be true or false"),
]


@pytest.mark.parametrize(("kwargs", "error", "text"), PY_BAD)
async def test_bad_python_calls_raise_clear_errors_and_change_nothing(db_url: str, kwargs: dict[str, Any],
                                                                      error: type[Exception], text: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        first = await engine.aprocess("loan please")
        cid = first.conversation_id
        audit_before = len(await engine.aaudit(cid))
        with pytest.raises(error, match=text):
            await engine.aprocess(conversation_id=cid, **kwargs)
        assert (await engine.astate(cid))["turn"] == 1
        assert len(await engine.aaudit(cid)) == audit_before
        assert len(await engine.ahistory(cid)) == 1
