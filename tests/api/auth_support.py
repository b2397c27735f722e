"""Keys, environments and request helpers for tests of the authenticated HTTP API."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

USER_A = "user-a-key-0123456789abcdef"
USER_B = "user-b-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
MESSAGE = "/api/v1/conversation/message"


def auth_env(**extra: str) -> dict[str, str]:
    """Settings (as environment) of a server with two user keys and one admin key, plus ``extra``."""
    return {"CONVENGINE_API__AUTH__API_KEYS": json.dumps([USER_A, USER_B]),
            "CONVENGINE_API__AUTH__ADMIN_KEYS": json.dumps([ADMIN]), **extra}


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def send(client: httpx.AsyncClient, key: str | None, text: str, cid: str | None = None,
               **extra: Any) -> httpx.Response:
    body = {"message": text, **({"conversationId": cid} if cid else {}), **extra}
    return await client.post(MESSAGE, json=body, headers=bearer(key))


async def start(client: httpx.AsyncClient, key: str, text: str = "a loan please") -> str:
    """A conversation of ``key``'s caller, one turn in; its id."""
    response = await send(client, key, text)
    assert response.status_code == 200 and response.json()["success"], response.text
    return str(response.json()["conversationId"])


def assert_refused(response: httpx.Response, status: int, code: str, says: str = "") -> dict[str, Any]:
    """A refusal in ConvEngine's error shape (ErrorBody)."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"success", "errorCode", "message", "details"} and body["success"] is False, body
    assert body["errorCode"] == code, body
    assert says in body["message"], body
    return body  # type: ignore[no-any-return]


def new_id() -> str:
    return str(uuid.uuid4())
