"""The served OpenAPI schema says what the server does: media types, the error responses every route
can give (JSON, in the error shape), who may call what, and the rules the server enforces on input.

The Schemathesis run (tests/fuzz/test_openapi_fuzz.py) checks the same contract by random requests;
these tests pin the cases the operator reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from convengine.api.app import create_app
from tests.api.auth_support import ADMIN, USER_A, bearer, new_id
from tests.conftest import PACKS

PUBLIC = {"/health", "/ready"}
ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    keys = {"api": {"auth": {"api_keys": [USER_A], "admin_keys": [ADMIN]}}}
    app = create_app(db_url, pack=str(PACKS / "api_pack.yaml"), settings=keys)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as served:
        yield served


@pytest.fixture
def schema(client: TestClient) -> dict[str, Any]:
    return client.get("/openapi.json").json()  # type: ignore[no-any-return]


def body_schema(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {**schema["components"]["schemas"][name], "components": schema["components"]}


def valid(fragment: dict[str, Any], value: Any) -> bool:
    return bool(jsonschema_rs.validator_for(fragment, validate_formats=True).is_valid(value))


def test_every_error_response_is_declared_as_json_in_the_error_shape(schema: dict[str, Any]) -> None:
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"400", "413", "431"} <= set(responses), (method, path)
            if path not in PUBLIC:
                assert {"401", "500"} <= set(responses) and "WWW-Authenticate" in responses["401"]["headers"]
                assert operation["security"] == [{"bearer": []}], (method, path)
            else:
                assert operation["security"] == [], path
            if method in ("post", "put", "patch", "delete"):  # a browser from a foreign origin is refused
                assert "ORIGIN_NOT_ALLOWED" in responses["403"]["description"], (method, path)
            elif "403" in responses:
                assert path.startswith(("/api/v1/cache", "/api/v1/versions", "/console", "/api/v1/conversation/{"))
            for status, response in responses.items():
                if status[0] in "45" and (path, status) != ("/ready", "503"):
                    assert response["content"] == ERROR_BODY, (method, path, status)
    assert "HTTPValidationError" not in schema["components"]["schemas"]  # FastAPI's 422 body: never sent


def test_success_media_types_are_the_ones_served(client: TestClient, schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    assert list(paths["/api/v1/conversation/stream/{conversation_id}"]["get"]["responses"]["200"]["content"]) == [
        "text/event-stream"]
    assert list(paths["/api/v1/cache/refresh"]["post"]["responses"]["200"]["content"]) == ["text/plain"]
    assert list(paths["/console/api/conversations/{conversation_id}/export"]["get"]["responses"]["200"]["content"]) \
        == ["application/yaml"]
    refused = client.post("/api/v1/cache/refresh", headers=bearer(USER_A))  # declared text/plain before
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/json"
    assert refused.json()["errorCode"] == "FORBIDDEN"
    refreshed = client.post("/api/v1/cache/refresh", headers=bearer(ADMIN))
    assert refreshed.status_code == 200 and refreshed.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("reset", [True, False, 1, 0, "true", "false", "TRUE", None])
def test_reset_is_read_as_convengines_java_server_reads_it(client: TestClient, schema: dict[str, Any],
                                                           reset: Any) -> None:
    assert valid(body_schema(schema, "MessageRequest")["properties"]["reset"], reset)
    reply = client.post("/api/v1/conversation/message", json={"message": "hello", "reset": reset},
                        headers=bearer(USER_A))
    assert reply.status_code == 200 and reply.json()["success"], reply.text


@pytest.mark.parametrize("reset", [2, -1, "yes", "maybe", 0.5, [], {}])
def test_a_reset_outside_the_declared_values_is_refused(client: TestClient, schema: dict[str, Any],
                                                        reset: Any) -> None:
    assert not valid(body_schema(schema, "MessageRequest")["properties"]["reset"], reset)
    reply = client.post("/api/v1/conversation/message", json={"message": "hello", "reset": reset},
                        headers=bearer(USER_A))
    assert reply.status_code == 422 and "reset must be true or false" in reply.json()["message"], reply.text


def test_the_rules_the_server_enforces_on_input_are_in_the_schema(client: TestClient, schema: dict[str, Any]) -> None:
    feedback = body_schema(schema, "FeedbackRequestBody")
    assert not valid(feedback["properties"]["conversationId"], "")
    refused = client.post("/api/v1/conversation/feedback", json={"conversationId": "", "feedbackType": "THUMBS_UP"},
                          headers=bearer(USER_A))
    assert refused.status_code == 422 and refused.json()["errorCode"] == "INVALID_CONVERSATION_ID"
    assert valid(feedback["properties"]["feedbackType"], " thumbs_down ")
    assert not valid(feedback["properties"]["feedbackType"], "LIKE")

    user_id = body_schema(schema, "MessageRequest")["properties"]["userId"]
    for bad in ("a\x01b", "tab\there", "rtl\u202eoverride", " ", "x" * 201):
        assert not valid(user_id, bad), repr(bad)
        reply = client.post("/api/v1/conversation/message", json={"message": "hi", "userId": bad},
                            headers=bearer(USER_A))
        assert reply.status_code == 422 and "user_id" in reply.json()["message"], (repr(bad), reply.text)
    for good in ("alice", "émile 😀", "a\u00a0b", "x" * 200):
        assert valid(user_id, good), repr(good)
        reply = client.post("/api/v1/conversation/message", json={"message": "hi", "userId": good},
                            headers=bearer(USER_A))
        assert reply.status_code == 200, (repr(good), reply.text)

    history = schema["paths"]["/api/v1/versions/history"]["get"]["parameters"][0]
    assert history["name"] == "channel" and not valid(history["schema"], "")
    assert client.get("/api/v1/versions/history?channel=", headers=bearer(ADMIN)).status_code == 422

    until = next(p for p in schema["paths"]["/console/api/conversations"]["get"]["parameters"] if p["name"] == "until")
    assert not valid(until["schema"], "0.5") and valid(until["schema"], "2025-01-31T09:30:00Z")
    for value, status in (("0.5", 422), ("2025-01-31T09:30:00Z", 200), ("2025-01-31T09:30:00+02:00", 200)):
        answer = client.get("/console/api/conversations", params={"until": value}, headers=bearer(ADMIN))
        assert answer.status_code == status, (value, answer.text)


def test_an_unexpected_failure_is_answered_in_the_error_shape_without_a_traceback(client: TestClient) -> None:
    engine = client.app.state.engine  # type: ignore[attr-defined]

    async def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("boom at /secret/path")

    engine.asteps = broken
    answer = client.get(f"/api/v1/conversation/{new_id()}/steps", headers=bearer(ADMIN))
    assert answer.status_code == 500 and answer.headers["content-type"] == "application/json"
    assert answer.json() == {"success": False, "errorCode": "INTERNAL_ERROR", "message": "internal error: RuntimeError",
                             "details": []}


def test_every_turn_operation_declares_the_admission_refusal(schema: dict[str, Any]) -> None:
    turns = ["/api/v1/conversation/message", "/api/v1/conversation/start", "/api/v1/conversation/{conversation_id}/undo",
             "/api/v1/conversation/{conversation_id}/redo", "/api/v1/conversation/{conversation_id}/handoff/resume"]
    for path in turns:
        busy = schema["paths"][path]["post"]["responses"]["503"]
        assert "SERVER_BUSY" in busy["description"] and "Retry-After" in busy["headers"], path
        assert busy["content"] == ERROR_BODY, path
    assert "503" not in schema["paths"]["/api/v1/conversation/feedback"]["post"]["responses"]
