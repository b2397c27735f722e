"""Schemathesis against the running server's OpenAPI schema, as a user and as an admin: no 5xx, and no
breach of the documented contract.

Every Schemathesis check runs (no server error; documented status codes, content types and headers;
responses matching their schemas; schema-invalid requests rejected; authentication enforced where
the schema says it is required) except ``positive_data_acceptance``: schema-valid requests may
still be refused on purpose, with a documented 4xx: a message longer than ``api.max_message_chars``
(413), a NUL character inside free-form JSON (``inputParams``, feedback ``metadata``, a pack), which
JSON Schema cannot state for arbitrary values, a pack that does not validate, a version that
does not exist. The SSE stream is included: its timeouts are short here, so each stream ends.

Bounded: a fixed number of examples per operation (fewer for the admin operations a user key is
refused on) and a time bound per backend (:data:`BUDGET_S`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from convengine.db import parse_database_url, upgrade
from tests.api.auth_support import ADMIN, USER_A, auth_env
from tests.conftest import BACKENDS, drop_postgres_database, new_postgres_database
from tests.servers import Server

SHORT_STREAMS = {"CONVENGINE_TRANSPORT__SSE__EMITTER_TIMEOUT_MS": "1000", "CONVENGINE_API__STREAMS__IDLE_TIMEOUT_S": "0.3"}
KEYS = {"user": USER_A, "admin": ADMIN}
EXAMPLES = {"user": 8, "admin": 12}
REFUSED_EXAMPLES = 2
"""Examples of an admin operation with a user key: each is a 403 before anything is read."""
BUDGET_S = 60
"""Time bound of one backend's run (both keys, both modes): past it, each remaining operation gets one
example (every operation is still called; a loaded machine makes the run shallower, not longer)."""


@pytest.fixture(scope="module", params=BACKENDS)
def api_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("openapi")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'api.db'}"
        upgrade(parse_database_url(url))
    else:
        url = new_postgres_database()
    server = Server(url, Path(folder) / "server.log", env=auth_env(**SHORT_STREAMS))
    server.started = time.monotonic()  # type: ignore[attr-defined]
    yield server
    server.stop()
    if request.param == "postgres":
        drop_postgres_database(url)


def api_schema(server: Server, key: str) -> schemathesis.BaseSchema:
    """The served schema, with ``key`` as its bearer scheme's credentials (Schemathesis then sends it as
    explicit authentication, and leaves it out only in the cases that test its absence)."""
    schema = schemathesis.openapi.from_url(f"{server.base}/openapi.json")
    auth = schema.config.auth
    auth.openapi = type(auth.openapi)(schemes={"bearer": {"bearer": KEYS[key]}})  # [auth.openapi.bearer]
    return schema


def operations(schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    found = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in found} >= {"/api/v1/conversation/message", "/api/v1/conversation/audit/{conversation_id}",
                                         "/api/v1/conversation/stream/{conversation_id}", "/api/v1/cache/refresh",
                                         "/health", "/ready"}
    return found


def admin_only(operation: schemathesis.APIOperation) -> bool:
    """Declares the admin scope's 403 (FORBIDDEN); the origin check's 403 is on every state-changing route."""
    forbidden = operation.definition.raw.get("responses", {}).get("403", {})
    return "FORBIDDEN" in forbidden.get("description", "")


# Schemathesis drives Hypothesis directly here: its pytest plugin does not support pytest 9 yet.
@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_keeps_its_contract_and_never_fails_with_a_server_error(
        api_server: Server, mode: GenerationMode, key: str) -> None:
    unsatisfiable: list[str] = []
    answered: set[tuple[bool, int]] = set()
    """(admin operation, status) of every answer: the key must have been sent (not a run of 401s)."""
    for operation in operations(api_schema(api_server, key)):
        if mode is GenerationMode.NEGATIVE and not (list(operation.iter_parameters()) or len(operation.body)):
            continue  # a request without parameters or body has nothing to get wrong
        examples = REFUSED_EXAMPLES if key == "user" and admin_only(operation) else EXAMPLES[key]
        if time.monotonic() - api_server.started > BUDGET_S:  # type: ignore[attr-defined]
            examples = 1

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: schemathesis.Case) -> None:
            response = case.call_and_validate(base_url=api_server.base, timeout=30,
                                              excluded_checks=[positive_data_acceptance])
            answered.add((admin_only(case.operation), response.status_code))

        try:
            call()
        except Unsatisfiable:
            unsatisfiable.append(f"{operation.method.upper()} {operation.path}")
    assert unsatisfiable == [], unsatisfiable
    if mode is GenerationMode.POSITIVE:
        assert (False, 200) in answered, answered
        assert ((True, 200) in answered) == (key == "admin") and ((True, 403) in answered) == (key == "user"), answered
