"""The node wrapper: what a failing step tells the caller and the audit (a database's text stays in
the server log), timings, and a graph run without the engine's context."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
import sqlalchemy as sa

from convengine._internal.turn_io import DATABASE_FAILED_MESSAGE, DATABASE_UNAVAILABLE_MESSAGE
from convengine.catalog import names
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.graph.builder import build_graph
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack, payload_of

PRIVATE = "ssn='123-45-6789'"


def failing_statement(turn: Any) -> None:
    raise sa.exc.IntegrityError(f"INSERT INTO people VALUES ({PRIVATE})", {}, sqlite3.IntegrityError("UNIQUE failed"))


def unavailable_database(turn: Any) -> None:
    raise sa.exc.OperationalError(f"SELECT * FROM people WHERE {PRIVATE}", {},
                                  sqlite3.OperationalError("database is locked"))


@pytest.mark.parametrize(("step", "message", "code"), [
    (failing_statement, DATABASE_FAILED_MESSAGE, ErrorCode.INTERNAL_ERROR),
    (unavailable_database, DATABASE_UNAVAILABLE_MESSAGE, ErrorCode.DATABASE_UNAVAILABLE),
])
async def test_a_database_failure_in_a_step_is_reported_without_the_drivers_text(
        sqlite_db_url: str, step: Any, message: str, code: ErrorCode, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING")
    async with engine_on(sqlite_db_url, pack(), steps=[Step("lookup", step, before=names.RULES)]) as engine:
        cid = "2b8f0a1e-1111-4222-8333-444455556666"
        with pytest.raises(ConvEngineError) as info:
            await engine.aprocess("hello", cid)
        audit = await engine.aaudit(cid)
    error = payload_of(audit, "STEP_ERROR")
    assert (error["step"], error["errorMessage"]) == ("lookup", message)
    assert info.value.code == code and info.value.details["step"] == "lookup"
    assert message in info.value.message
    assert PRIVATE not in info.value.message and all(PRIVATE not in str(e.payload) for e in audit)
    assert "a step failed on the database" in caplog.text  # the detail goes to the server log
    assert PRIVATE not in caplog.text  # but not the statement, which quotes the caller's data


async def test_every_step_that_ran_is_timed_in_pipeline_timing(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack(), steps=[Step("host", lambda t: None, after=names.RULES)]) as engine:
        result = await engine.aprocess("hello")
        events = await engine.aaudit(result.conversation_id)
    timed = [part.split("=")[0] for part in payload_of(events, "PIPELINE_TIMING")["steps"].split(", ")]
    ran = [e.payload["step"] for e in events if e.stage == "STEP_ENTER"]
    assert timed == ran[:-1]  # every step before the guard itself, in the order they ran
    assert "host" in timed and names.SCHEMA_EXTRACTION not in timed


async def test_the_graph_refuses_to_run_without_the_engines_context() -> None:
    graph = build_graph().compile()
    with pytest.raises(TypeError, match="needs a TurnContext; run turns through convengine.Engine"):
        await graph.ainvoke({"turn_input": {"text": "hello"}})
