"""Secrets in the open (security issue item 10).

A bearer token read from a file with its trailing newline, and a database URL with a password,
must never appear in what leaves the engine: the HTTP response, ce_audit (and every other ce_*
row of the conversation), log output, the raised exception, the server's log or ``pack export``
(unless ``--include-secrets``). Settings may reference secrets as ``${env:NAME}`` instead of
storing them; the reference is what is stored and exported.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from convengine.catalog.errors import ConfigError, ErrorCode, StepError, ToolError
from convengine.db import create_sync_engine, parse_database_url
from convengine.nodes.common import Step
from convengine.settings import HttpApiSettings
from convengine.tools.http import HttpAuth, HttpRequest, HttpRunner
from tests.conftest import PACKS
from tests.helpers import engine_on, pack, payload_of, turn_events
from tests.http_stub import http_server
from tests.security.world import assert_unchanged, packed_audit_text
from tests.servers import free_port

pytestmark = pytest.mark.asyncio

TOKEN = "tok-7Qx9vR2mLs81"
DB_PASSWORD = "Db-Pa55-Zk31x"
REPORTS_URL = f"mysql://reporter:{DB_PASSWORD}@db.internal/reports"
HTTP_TOOL = {"tool_id": 1, "tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "LOAN",
             "state_code": "ANY", "description": "Look up the customer"}
DB_TOOL = {"tool_id": 2, "tool_code": "reports.orders", "tool_group": "DB", "intent_code": "LOAN",
           "state_code": "ANY", "description": "Orders from the reports database"}
DB_TEMPLATE = {"tool_id": 2, "sql_template": "SELECT 1 AS one", "param_schema": {}, "max_rows": 1}
SECRET_SETTINGS = {"mcp": {"http-api": {"allowed-hosts": ["127.0.0.1"], "defaults": {"max-attempts": 1}},
                           "db": {"databases": {"reports": REPORTS_URL},
                                  "tool-databases": {"reports.orders": "reports"}}}}
CONVERSATION_TABLES = ("ce_audit", "ce_conversation", "ce_conversation_history")
"""Plus ce_audit_turn, read unpacked (``packed_audit_text``)."""


def secret_pack() -> dict[str, Any]:
    return pack(ce_mcp_tool=[HTTP_TOOL, DB_TOOL], ce_mcp_db_tool=[DB_TEMPLATE], settings=SECRET_SETTINGS)


def tool_request(code: str) -> dict[str, Any]:
    return {"tool_request": {"tool_code": code, "args": {}}}


def token_tool(token_file: Path, url: str) -> Any:
    def crm(args: dict[str, Any], ctx: Any) -> HttpRequest:
        return HttpRequest(url=url + "/customers", auth=HttpAuth(type="BEARER", value=token_file.read_text()))

    return crm


def stored_rows(db_url: str) -> str:
    """Every row of the conversation tables, as text (what the database keeps)."""
    engine = create_sync_engine(parse_database_url(db_url))
    try:
        with engine.connect() as conn:
            return "\n".join([repr(tuple(row)) for table in CONVERSATION_TABLES
                               for row in conn.execute(sa.text(f"SELECT * FROM {table}"))]
                              + packed_audit_text(conn))
    finally:
        engine.dispose()


def assert_hidden(secret: str, **places: str) -> None:
    leaked = [name for name, text in places.items() if secret in text]
    assert not leaked, f"{secret!r} leaked into {leaked}"


# --- Python API ---------------------------------------------------------------------------


async def test_a_bearer_token_with_a_trailing_newline_never_leaks(db_url: str, world: Any, tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    token_file = tmp_path / "crm.token"
    token_file.write_text(TOKEN + "\n")
    with http_server(lambda path, body: (200, {"name": "Robert"})) as crm:
        tools = {"crm.lookup": token_tool(token_file, crm.url)}
        async with engine_on(db_url, secret_pack(), tools=tools) as engine:
            first = await engine.aprocess("loan")
            before = world(first.conversation_id)
            with caplog.at_level(logging.DEBUG):
                result = await engine.aprocess("look me up", first.conversation_id,
                                               input_params=tool_request("crm.lookup"))
            shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
            audit = json.dumps([e.payload for e in await engine.aaudit(first.conversation_id)])
        after = world(first.conversation_id)
        runner = HttpRunner()
        with pytest.raises(ToolError) as raised:
            spec = HttpRequest(url=crm.url, auth=HttpAuth(type="BEARER", value=TOKEN + "\n"))
            await runner.execute("crm.lookup", spec, HttpApiSettings(allowed_hosts=["127.0.0.1"]))
        await runner.aclose()
    assert ("header Authorization of tool crm.lookup is not a valid header value: it ends with a line break"
            in shaped["error"])
    assert crm.requests == []  # refused before anything was sent
    assert_hidden(TOKEN, context=json.dumps(result.context), payload=str(result.payload), audit=audit,
                  stored=stored_rows(db_url), logs=caplog.text,
                  exception="".join(traceback.format_exception(raised.value)))
    assert_unchanged(before, after)


async def test_a_database_password_never_leaks_from_a_tool_error(db_url: str, world: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    async with engine_on(db_url, secret_pack()) as engine:
        first = await engine.aprocess("loan")
        before = world(first.conversation_id)
        with caplog.at_level(logging.DEBUG):
            result = await engine.aprocess("my orders", first.conversation_id,
                                           input_params=tool_request("reports.orders"))
        shaped = payload_of(await turn_events(engine, first.conversation_id), "TOOL_ORCHESTRATION_ERROR")
        audit = json.dumps([e.payload for e in await engine.aaudit(first.conversation_id)])
        label = engine.database_label
    after = world(first.conversation_id)
    assert "unsupported database URL 'mysql://reporter:***@db.internal/reports'" in shaped["error"]
    assert_hidden(DB_PASSWORD, context=json.dumps(result.context), audit=audit, stored=stored_rows(db_url),
                  logs=caplog.text, label=label)
    assert_unchanged(before, after)


async def test_a_failing_step_is_reported_without_its_secrets(db_url: str, world: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    def report(turn: Any) -> None:
        raise RuntimeError(f"lost {REPORTS_URL} while sending Authorization: Bearer {TOKEN}")

    cid = str(uuid.uuid4())
    async with engine_on(db_url, secret_pack(), steps=[Step("report", report, after="rules")]) as engine:
        before = world(cid)
        with caplog.at_level(logging.DEBUG), pytest.raises(StepError) as raised:
            await engine.aprocess("loan", cid)
        logging.getLogger("convengine.runtime").warning("retrying %s after: %s", cid, raised.value.__cause__)
        events = await engine.aaudit(cid)
    after = world(cid)
    audit, stages = json.dumps([e.payload for e in events]), [e.stage for e in events]
    error = raised.value
    assert error.code is ErrorCode.PIPELINE_STEP_FAILED
    assert "mysql://reporter:***@db.internal/reports" in error.message
    for secret in (DB_PASSWORD, TOKEN):
        assert_hidden(secret, message=error.message, exception="".join(traceback.format_exception(error)),
                      audit=audit, stored=stored_rows(db_url), logs=caplog.text)
    assert "STEP_ERROR" in stages and stages[-1] == "ENGINE_KNOWN_FAILURE"
    assert_unchanged(before, after)


async def test_secrets_from_the_environment_stay_references(db_url: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACK_TEST_REPORTS_PASSWORD", DB_PASSWORD)
    referenced = "postgresql://reporter:${env:PACK_TEST_REPORTS_PASSWORD}@db.internal/reports"
    data = pack(settings={"mcp": {"db": {"databases": {"reports": referenced}}}})
    async with engine_on(db_url, data) as engine:
        resolved = engine.settings.mcp.db.databases["reports"]
    exported = run_cli("pack", "export", "--url", db_url)
    assert resolved == f"postgresql://reporter:{DB_PASSWORD}@db.internal/reports"
    assert "${env:PACK_TEST_REPORTS_PASSWORD}" in exported.stdout and DB_PASSWORD not in exported.stdout
    monkeypatch.delenv("PACK_TEST_REPORTS_PASSWORD")
    with pytest.raises(ConfigError) as missing:
        async with engine_on(db_url, data):
            pass
    assert "mcp.db.databases.reports refers to ${env:PACK_TEST_REPORTS_PASSWORD}" in missing.value.message
    assert "PACK_TEST_REPORTS_PASSWORD is not set" in missing.value.message


# --- the live server, its log and the CLI ---------------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, check=False)


def served_url(db_url: str) -> str:
    """The test database's URL with a password in it (the test PostgreSQL trusts local connections)."""
    if not db_url.startswith("postgresql"):
        return db_url
    return db_url.replace("postgresql://postgres@", f"postgresql://postgres:{DB_PASSWORD}@", 1)


def write_server_files(folder: Path, stub_url: str) -> tuple[Path, Path]:
    data = secret_pack()
    (folder / "server.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    (folder / "crm.token").write_text(TOKEN + "\n", encoding="utf-8")
    (folder / "server_tasks.py").write_text(
        "from pathlib import Path\n"
        "from convengine.tools.http import HttpAuth, HttpRequest\n\n\n"
        "def crm(args, ctx):\n"
        f"    token = Path({str(folder / 'crm.token')!r}).read_text()\n"
        f"    return HttpRequest(url={stub_url!r} + '/customers',\n"
        "                       auth=HttpAuth(type='BEARER', value=token))\n\n\n"
        "TOOLS = {'crm.lookup': crm}\n", encoding="utf-8")
    return folder / "server.yaml", folder / "server_tasks.py"


async def test_the_server_its_log_and_pack_export_keep_secrets_secret(db_url: str, serve: Any, world: Any,
                                                                      tmp_path: Path) -> None:
    with http_server(lambda path, body: (200, {"name": "Robert"})) as crm:
        pack_file, tasks = write_server_files(tmp_path, crm.url)
        cid = str(uuid.uuid4())
        server = serve("--tasks", str(tasks), "--url", served_url(db_url), "--log-level", "debug",
                       pack=pack_file)
        before = world(cid)
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            replies = [await client.post("/api/v1/conversation/message", json=body) for body in (
                {"message": "loan", "conversationId": cid},
                {"message": "look me up", "conversationId": cid, "inputParams": tool_request("crm.lookup")},
                {"message": "my orders", "conversationId": cid,
                 "inputParams": tool_request("reports.orders")})]
            audit = await client.get(f"/api/v1/conversation/audit/{cid}")
            health = await client.get("/health")
        server.stop()
        after = world(cid)
    assert all(r.status_code == 200 for r in [*replies, audit, health])
    assert "it ends with a line break" in replies[1].text
    assert "mysql://reporter:***@db.internal" in replies[2].text
    assert crm.requests == []
    responses = "\n".join(r.text for r in [*replies, audit, health])
    for secret in (TOKEN, DB_PASSWORD):
        assert_hidden(secret, responses=responses, stored=stored_rows(db_url),
                      server_log=server.log_path.read_text())
    assert_unchanged(before, after)
    exported = run_cli("pack", "export", "--url", db_url)
    with_secrets = run_cli("pack", "export", "--url", db_url, "--include-secrets")
    assert exported.returncode == 0 and "mysql://reporter:***@db.internal/reports" in exported.stdout
    assert "masked 1 secret value" in exported.stderr and DB_PASSWORD not in exported.stdout + exported.stderr
    assert REPORTS_URL in with_secrets.stdout


async def test_a_server_that_cannot_start_hides_the_database_password(db_url: str, world: Any) -> None:
    before = world()
    failed = run_cli("serve", "--url", f"mysql://ce:{DB_PASSWORD}@db.internal/convengine", "--port",
                     str(free_port()), "--llm", "none", "--pack", str(PACKS / "api_pack.yaml"))
    assert failed.returncode != 0
    assert "unsupported database URL 'mysql://ce:***@db.internal/convengine'" in failed.stderr
    assert_hidden(DB_PASSWORD, stdout=failed.stdout, stderr=failed.stderr)
    assert_unchanged(before, world())
