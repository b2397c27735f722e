"""Attacks on conversation memory: undoing or reading another caller's conversation, a userId that
tries to take over another user's conversation or long-term properties, hostile user ids, and
secrets reaching a sink through a hostile message.

Each attack must change nothing it does not own (the world capture) and be refused clearly.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from convengine.catalog.errors import ConversationNotFoundError, InvalidInputError
from tests.helpers import engine_on, pack
from tests.memory.http_support import MESSAGE, as_, served
from tests.security.world import assert_unchanged

pytestmark = pytest.mark.asyncio

MEMORY = {"conversation_memory": {"long_term": ["language"], "secret": ["pin"]}}
RULES = [{"phase": "PRE_RESPONSE_RESOLUTION", "intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX",
          "match_pattern": "(?i)french", "action": "SET_TASK", "action_value": "prefs:french", "priority": 1}]
TASKS = {"prefs": {"french": lambda task: task.context.__setitem__("language", "fr")}}


async def test_another_caller_cannot_undo_redo_or_read_steps(db_url: str, world: Any) -> None:
    async with served(db_url, pack()) as client:
        cid = (await client.post(MESSAGE, json={"message": "hello"}, headers=as_("alice"))).json()["conversationId"]
        await client.post(MESSAGE, json={"message": "a loan", "conversationId": cid}, headers=as_("alice"))
        before = world()
        for path in ("undo", "redo"):
            refused = await client.post(f"/api/v1/conversation/{cid}/{path}", headers=as_("mallory"))
            assert refused.status_code == 404 and refused.json()["errorCode"] == "CONVERSATION_NOT_FOUND"
        steps = await client.get(f"/api/v1/conversation/{cid}/steps", headers=as_("mallory"))
        assert steps.status_code == 404
        anonymous = await client.post(f"/api/v1/conversation/{cid}/undo")
        assert anonymous.status_code == 401
        bad_id = await client.post("/api/v1/conversation/not-a-uuid/undo", headers=as_("alice"))
        assert bad_id.status_code == 422 and bad_id.json()["errorCode"] == "INVALID_CONVERSATION_ID"
        assert_unchanged(before, world())
        assert (await client.post(f"/api/v1/conversation/{cid}/undo", headers=as_("alice"))).status_code == 200


async def test_a_user_id_cannot_take_over_another_users_conversation(db_url: str, world: Any) -> None:
    async with engine_on(db_url, pack(ce_rule=RULES, settings=MEMORY), tasks=TASKS) as engine:
        cid = (await engine.aprocess("a loan in french", user_id="ana")).conversation_id
        before = world()
        for attempt in (engine.aprocess("hello", cid, user_id="mallory"),
                        engine.aprocess("hello", cid, reset=True, user_id="mallory"),
                        engine.aprocess("hello", cid, user_id="ANA"),
                        engine.aprocess("hello", cid, user_id="ana ")):
            with pytest.raises(ConversationNotFoundError):
                await attempt
        assert_unchanged(before, world())
        assert await engine.aproperties("ana") == {"language": "fr"}
        assert await engine.aproperties("mallory") == {}
        # a new conversation of mallory does not see ana's properties, whatever its id
        own = await engine.aprocess("hello", str(uuid.uuid4()), user_id="mallory")
        assert "language" not in own.context


@pytest.mark.parametrize("user_id", ["ana.x", "ana/../bob", "*", "%", "' OR 1=1 --", "ä" * 200])
async def test_hostile_user_ids_are_data_not_namespaces(db_url: str, user_id: str) -> None:
    async with engine_on(db_url, pack(ce_rule=RULES, settings=MEMORY), tasks=TASKS) as engine:
        await engine.aprocess("a loan in french", user_id="ana")
        mine = await engine.aprocess("hello", user_id=user_id)
        assert "language" not in mine.context
        assert await engine.aproperties(user_id) == {}
        await engine.aforget_user(user_id, conversations=True)
        assert await engine.aproperties("ana") == {"language": "fr"}
        with pytest.raises(InvalidInputError):
            await engine.aproperties("")


async def test_a_hostile_message_cannot_bring_a_secret_back_through_the_audit(db_url: str) -> None:
    """The secret is sent as a param and the message repeats it in every shape a sink might keep."""
    pin = "90210"
    async with engine_on(db_url, pack(settings=MEMORY)) as engine:
        message = f'a loan {pin} {{"pin": "{pin}"}} {pin[::-1]}{pin}'
        result = await engine.aprocess(message, input_params={"pin": pin, pin: "as a key"})
        cid = result.conversation_id
        sinks = [await engine.astate(cid), await engine.ahistory(cid), [e.payload for e in await engine.aaudit(cid)],
                 await engine.asteps(cid), result.context]
        assert pin not in repr(sinks)


async def test_user_id_over_http_is_checked(db_url: str, world: Any) -> None:
    async with served(db_url, pack()) as client:
        before = world()
        for bad in ("", " ", "x" * 201, "a\u0000b", 42, ["ana"], {"id": "ana"}):
            refused = await client.post(MESSAGE, json={"message": "hello", "userId": bad}, headers=as_("alice"))
            assert refused.status_code == 422 and refused.json()["errorCode"] == "INVALID_INPUT"
        assert_unchanged(before, world())


async def test_a_callers_input_params_cannot_write_a_users_long_term_memory(db_url: str) -> None:
    """inputParams are the caller's: a long-term name among them is saved only where the pack says
    ``long_term_from_caller``, and then only for the caller's own user."""
    rules = [{**RULES[0], "action": "SET_INPUT_PARAM", "action_value": "language:fr"}]
    async with served(db_url, pack(ce_rule=rules, settings=MEMORY)) as client:
        body = {"message": "hello", "userId": "ana", "inputParams": {"language": "xx"}}
        assert (await client.post(MESSAGE, json=body, headers=as_("mallory"))).status_code == 200
        assert (await client.post(MESSAGE, json={**body, "message": "a loan in french"},
                                  headers=as_("alice"))).status_code == 200
        read = await client.get("/api/v1/users/properties", params={"userId": "ana"}, headers=as_("mallory"))
        assert read.json()["properties"] == {}  # mallory's ana: the caller's param was not saved
        read = await client.get("/api/v1/users/properties", params={"userId": "ana"}, headers=as_("alice"))
        assert read.json()["properties"] == {"language": "fr"}  # alice's ana: the rule's value, not the param's
    allowed = {"conversation_memory": {**MEMORY["conversation_memory"], "long_term_from_caller": ["language"]}}
    async with served(db_url, pack(settings=allowed)) as client:
        body = {"message": "hello", "userId": "ben", "inputParams": {"language": "de"}}
        assert (await client.post(MESSAGE, json=body, headers=as_("mallory"))).status_code == 200
        mine = await client.get("/api/v1/users/properties", params={"userId": "ben"}, headers=as_("mallory"))
        theirs = await client.get("/api/v1/users/properties", params={"userId": "ben"}, headers=as_("alice"))
        assert mine.json()["properties"] == {"language": "de"} and theirs.json()["properties"] == {}
