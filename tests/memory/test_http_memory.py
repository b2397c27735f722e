"""Undo, redo, steps and userId over HTTP (both backends), with the audit."""

from __future__ import annotations

import pytest

from tests.helpers import pack
from tests.memory.http_support import MESSAGE, as_, served

pytestmark = pytest.mark.asyncio


async def test_undo_and_redo_endpoints(db_url: str) -> None:
    async with served(db_url, pack()) as client:
        first = (await client.post(MESSAGE, json={"message": "hello", "userId": "u-1"}, headers=as_("alice"))).json()
        cid = first["conversationId"]
        second = await client.post(MESSAGE, json={"message": "a loan", "conversationId": cid}, headers=as_("alice"))
        assert second.json()["intent"] == "LOAN"
        undone = await client.post(f"/api/v1/conversation/{cid}/undo", headers=as_("alice"))
        assert undone.status_code == 200
        body = undone.json()
        assert (body["action"], body["turn"], body["intent"], body["state"]) == ("UNDO", 1, "GREETING", "IDLE")
        assert body["canRedo"] is True and body["canUndo"] is False and body["reversible"] is True
        again = await client.post(f"/api/v1/conversation/{cid}/undo", headers=as_("alice"))
        assert again.status_code == 409 and again.json()["errorCode"] == "NOTHING_TO_UNDO"
        redone = await client.post(f"/api/v1/conversation/{cid}/redo", headers=as_("alice"))
        assert redone.status_code == 200 and redone.json()["intent"] == "LOAN"
        none = await client.post(f"/api/v1/conversation/{cid}/redo", headers=as_("alice"))
        assert none.status_code == 409 and none.json()["errorCode"] == "NOTHING_TO_REDO"
        steps = (await client.get(f"/api/v1/conversation/{cid}/steps", headers=as_("alice"))).json()
        assert [(s["turn"], s["input"], s["undone"]) for s in steps] == [(1, "hello", False), (2, "a loan", False)]
        assert steps[1]["output"] == {"type": "TEXT", "value": "Loan started"}
        audit = (await client.get(f"/api/v1/conversation/audit/{cid}", headers=as_("alice"))).json()
        assert [r["stage"] for r in audit if r["stage"] in ("UNDO", "REDO")] == ["UNDO", "REDO"]


async def test_user_id_in_the_body_is_stored_and_cannot_change(db_url: str) -> None:
    async with served(db_url, pack()) as client:
        cid = (await client.post(MESSAGE, json={"message": "hello", "userId": "u-1"},
                                 headers=as_("alice"))).json()["conversationId"]
        other = await client.post(MESSAGE, json={"message": "hello", "conversationId": cid, "userId": "u-2"},
                                  headers=as_("alice"))
        assert other.status_code == 404 and other.json()["errorCode"] == "CONVERSATION_NOT_FOUND"
        same = await client.post(MESSAGE, json={"message": "a loan", "conversationId": cid, "userId": "u-1"},
                                 headers=as_("alice"))
        assert same.json()["success"] is True
        bad = await client.post(MESSAGE, json={"message": "hello", "userId": ""}, headers=as_("alice"))
        assert bad.status_code == 422 and "user_id" in bad.json()["message"]


async def test_an_ended_conversation_refuses_a_message_until_it_resets(db_url: str) -> None:
    data = pack(settings={"conversation_memory": {"end_states": ["START"]}})
    async with served(db_url, data) as client:
        cid = (await client.post(MESSAGE, json={"message": "a loan"}, headers=as_("alice"))).json()["conversationId"]
        refused = (await client.post(MESSAGE, json={"message": "hello", "conversationId": cid},
                                     headers=as_("alice"))).json()
        assert refused["success"] is False and refused["errorCode"] == "CONVERSATION_ENDED"
        assert refused["recoverable"] is True and "reset" in refused["message"]
        again = (await client.post(MESSAGE, json={"message": "hello", "conversationId": cid, "reset": True},
                                   headers=as_("alice"))).json()
        assert again["success"] is True and again["intent"] == "GREETING"
