"""``POST /api/v1/conversation/message`` reads its body itself (``api.body.read_body``) and is called
directly (``api.body.RequestRoute``): no per-request dependency solving on the hot path. Its callers must not see the difference: every malformed or unusual
body gets the reply a route declaring ``body: MessageRequest`` gets from FastAPI, the OpenAPI document
declares the body as FastAPI declares one, and a turn's reply has the bytes of the response model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.testclient import TestClient

from convengine.api.app import create_app
from convengine.api.body import DepthCheckedRoute, RequestRoute, read_body
from convengine.api.routes import json_reply
from convengine.api.schemas import MessageRequest, MessageResponse, PayloadBody
from tests.api.auth_support import MESSAGE, new_id
from tests.conftest import PACKS

JSON = "application/json"
DECLARED, READ, REPLY = "/reference/declared", "/reference/read", "/reference/reply"
UNUSUAL_REPLY = MessageResponse(success=True, conversationId=new_id(), intent="I", state="S", context='{"a": "é"}',
                                payload=PayloadBody(type="JSON", value={"ü": [1, 2.5, 1e16, None, True, "\u2028\x1f"]},
                                                    sources=[{"kb": "k", "source": "s", "score": 0.1}]))


def _reference_routes() -> APIRouter:
    """The message body declared the usual way, beside the same body read by ``read_body``."""
    reference = APIRouter(route_class=DepthCheckedRoute)

    @reference.post(DECLARED)
    async def declared(body: MessageRequest) -> dict[str, Any]:
        return body.model_dump()

    @reference.post(READ)
    async def read(request: Request) -> dict[str, Any]:
        return (await read_body(request, MessageRequest)).model_dump()

    @reference.post(REPLY, response_model=MessageResponse)
    async def reply() -> MessageResponse:
        return UNUSUAL_REPLY

    return reference


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    app = create_app(db_url, pack=str(PACKS / "api_pack.yaml"))
    app.include_router(_reference_routes())
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as served:
        yield served


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


MALFORMED: list[tuple[str | None, str | bytes]] = [
    (JSON, json.dumps({"message": None, "conversationId": 7})), (JSON, json.dumps({"message": 42})),
    (JSON, json.dumps({"message": "hi", "inputParams": [1, 2]})), (JSON, json.dumps({"message": "hi", "reset": "maybe"})),
    (JSON, json.dumps({"message": "hi", "reset": 2})), (JSON, json.dumps({"message": "hi", "userId": 5})),
    (JSON, json.dumps({"message": "bad \u0000 nul"})), (JSON, json.dumps({"message": "hi", "inputParams": {"k\u0000": 1}})),
    (JSON, '{"message": "\\ud800 lone"}'), (JSON, '{"message": "hi", "inputParams": {"a": ' + _deep(200) + "}}"),
    (JSON, _deep(100_000)), (JSON, "{not json"), (JSON, "{} x"), (JSON, ""), (JSON, "null"), (JSON, "[]"),
    (JSON, '"text"'), (JSON, b"\xff\xfe\x00bin"),
    (None, json.dumps({"message": "hi"})), (None, ""), ("", json.dumps({"message": "hi"})),
    ("text/plain", json.dumps({"message": "hi"})), ("application/json/x", json.dumps({"message": "hi"})),
    ("application/ json", json.dumps({"message": "hi"})), ("application/jsonx", json.dumps({"message": "hi"})),
    ("application/x-www-form-urlencoded", "message=hi"),
]
"""Bodies refused before any turn runs: the body reading's and the model's refusals."""
ACCEPTED: list[tuple[str | None, str | bytes]] = [
    (JSON, json.dumps({"message": "héllo ✓", "inputParams": {"a": [1, 2.5, None, True, {"b": "é"}]}})),
    (JSON, json.dumps({"reset": "TRUE", "userId": "ann", "extra": 1})), (JSON, json.dumps({"reset": 1, "message": None})),
    (JSON, '{"message": "a", "message": "b"}'), (JSON, "{}"), (JSON, '\ufeff{"message": "bom"}'.encode()),
    (JSON, '{"message": "utf-16"}'.encode("utf-16")),
    ("application/json; charset=utf-8", json.dumps({"message": "hi"})), ("Application/JSON", json.dumps({"message": "x"})),
    ("application/vnd.api+json", json.dumps({"message": "hi"})), (" application/json ; x=y", json.dumps({"message": "y"})),
]
"""Bodies the model accepts (however unusual their spelling or content type)."""


def _post(client: TestClient, path: str, content_type: str | None, body: str | bytes) -> tuple[int, Any]:
    headers = {} if content_type is None else {"content-type": content_type}
    response = client.post(path, content=body.encode() if isinstance(body, str) else body, headers=headers)
    return response.status_code, response.json()


def test_a_malformed_body_gets_the_reply_a_declared_body_gets(client: TestClient) -> None:
    for content_type, body in MALFORMED:
        status, reply = _post(client, MESSAGE, content_type, body)
        assert 400 <= status < 500 and reply["success"] is False, (body, reply)
        assert (status, reply) == _post(client, DECLARED, content_type, body), body
        assert (status, reply) == _post(client, READ, content_type, body), body


def test_an_accepted_body_is_read_as_a_declared_body_is(client: TestClient) -> None:
    for content_type, body in ACCEPTED:
        status, read = _post(client, READ, content_type, body)
        assert (status, read) == _post(client, DECLARED, content_type, body), body
        assert status == 200, read
    assert _post(client, MESSAGE, *ACCEPTED[0])[1]["success"] is True


def test_a_turn_reply_has_the_bytes_of_the_response_model(client: TestClient) -> None:
    assert json_reply(UNUSUAL_REPLY).body == client.post(REPLY).content
    response = client.post(MESSAGE, json={"message": "hello"})
    assert response.headers["content-type"] == JSON and response.json()["success"] is True
    assert json_reply(MessageResponse.model_validate_json(response.content)).body == response.content


def test_the_document_declares_the_body_as_fastapi_declares_one(client: TestClient) -> None:
    declared = FastAPI()

    @declared.post(MESSAGE)
    async def message(body: MessageRequest) -> None:
        """Only declared."""

    expected = declared.openapi()
    served = client.get("/openapi.json").json()
    operation = served["paths"][MESSAGE]["post"]
    assert operation["requestBody"] == expected["paths"][MESSAGE]["post"]["requestBody"]
    assert served["components"]["schemas"]["MessageRequest"] == expected["components"]["schemas"]["MessageRequest"]
    assert "422" in operation["responses"] and operation["responses"]["200"]["content"][JSON]["schema"] == {
        "$ref": "#/components/schemas/MessageResponse"}


def test_a_direct_route_takes_the_request_alone() -> None:
    """A direct route skips FastAPI's solving: one with anything to solve (a body, a dependency of the route or
    of its router, such as a security check added later) is refused when the app is built, not skipped."""

    async def with_body(request: Request, body: MessageRequest) -> None:
        """Would skip the body's validation if called directly."""

    async def alone(request: Request) -> None:
        """Takes the Request alone."""

    async def check() -> None:
        """A dependency (a security check, say)."""

    with pytest.raises(TypeError, match="takes the Request and nothing else"):
        APIRouter(route_class=RequestRoute).add_api_route("/x", with_body, methods=["POST"])
    with pytest.raises(TypeError, match="takes the Request and nothing else"):
        APIRouter(route_class=RequestRoute, dependencies=[Depends(check)]).add_api_route("/x", alone, methods=["POST"])
    APIRouter(route_class=RequestRoute).add_api_route("/x", alone, methods=["POST"])
