"""One behaviour for a database that holds another configuration (``chat``, ``serve``, ``Engine.open``
all refuse without --replace / replace=True and name what would change); a clear error for an empty
database; ``serve --tasks/--scripted`` without ``--pack``; one configuration id everywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from convengine import Engine
from convengine.api import create_app
from convengine.api.workers import ServeSpec
from convengine.catalog.errors import ConfigError
from convengine.cli.app import app
from convengine.db import create_sync_engine, parse_database_url
from tests.conftest import EXAMPLES
from tests.servers import in_process

ROOT = Path(__file__).resolve().parents[2]
SUPPORT, LOAN = EXAMPLES / "support_desk.yaml", EXAMPLES / "loan_application.yaml"
runner = CliRunner()


def intents(url: str) -> list[str]:
    engine = create_sync_engine(parse_database_url(url))
    with engine.connect() as conn:
        found = [r[0] for r in conn.execute(sa.text("SELECT intent_code FROM ce_intent ORDER BY intent_code"))]
    engine.dispose()
    return found


def test_engine_open_refuses_another_configuration_unless_replace(db_url: str) -> None:
    Engine.open(db_url, pack=SUPPORT).close()
    before = intents(db_url)
    with pytest.raises(ConfigError) as refused:
        Engine.open(db_url, pack=LOAN)
    message = refused.value.message
    assert "already holds a different configuration" in message and "replace=True" in message
    assert "ce_intent (" in message and "\n" not in message
    assert intents(db_url) == before

    Engine.open(db_url, pack=SUPPORT).close()  # the same pack again is no change: accepted
    with Engine.open(db_url, pack=LOAN, replace=True) as engine:
        assert "LOAN_APPLICATION" in intents(db_url) and engine.snapshot.tables()


def test_serve_refuses_another_configuration_unless_replace(db_url: str) -> None:
    Engine.open(db_url, pack=SUPPORT).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "serve", "--url", db_url, "--pack", str(LOAN),
                           "--port", "1", "--llm", "none"], capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert done.returncode == 2, done.stderr
    line = " ".join(done.stderr.split())
    assert "already holds a different configuration" in line and "--replace" in line and "ce_intent (" in line
    assert "LOAN_APPLICATION" not in intents(db_url)


def test_an_empty_database_is_one_clear_error_from_python(db_url: str) -> None:
    with Engine.open(db_url) as engine:
        assert any("holds no configuration" in w for w in engine.warnings)
        with pytest.raises(ConfigError) as empty:
            engine.process("hello")
    message = empty.value.message
    assert "holds no configuration" in message and "pack=" in message and "convengine pack import" in message
    assert "\n" not in message


def test_serve_tasks_apply_without_a_pack(db_url: str) -> None:
    Engine.open(db_url, pack=SUPPORT).close()  # a database that already holds its configuration
    bare = ServeSpec(url=db_url, host="127.0.0.1", llm="none").engine_options()
    with Engine.open(db_url, **bare) as engine:
        assert any("orderTasks" in w for w in engine.warnings)
    spec = ServeSpec(url=db_url, host="127.0.0.1", llm="none", tasks=str(EXAMPLES / "support_desk_tasks.py"))
    with Engine.open(db_url, **spec.engine_options()) as engine:
        assert not any("orderTasks" in w for w in engine.warnings)
        cid = engine.process("cancel my order").conversation_id
        engine.process("it arrived damaged", cid)
        assert "is cancelled" in engine.process("yes", cid).text


def test_serve_scripted_applies_without_a_pack(db_url: str) -> None:
    Engine.open(db_url, pack=LOAN).close()
    spec = ServeSpec(url=db_url, host="127.0.0.1", llm="none", scripted=str(EXAMPLES / "loan_application_scripted.py"))
    options = spec.engine_options()
    assert "pack" not in options and options["llm"] is not None
    with Engine.open(db_url, **options) as engine:
        assert engine.process("I would like a loan").intent == "LOAN_APPLICATION"


async def test_one_configuration_id_in_validate_versions_and_health(db_url: str) -> None:
    validated = runner.invoke(app, ["pack", "validate", str(SUPPORT)])
    found = re.search(r"configuration ([0-9a-f]{12})\)", validated.output)
    assert validated.exit_code == 0 and found, validated.output
    identity = found.group(1)

    imported = runner.invoke(app, ["pack", "import", str(SUPPORT), "--url", db_url])
    assert f"configuration {identity})" in imported.output, imported.output
    versions = runner.invoke(app, ["pack", "versions", "--url", db_url])
    assert re.search(rf"^\s+1\s+{identity}\s", versions.output, re.MULTILINE), versions.output

    engine = await Engine.aopen(db_url, tasks={"orderTasks": object()})
    try:
        async with in_process(create_app(engine=engine)) as client:
            health = (await client.get("/health")).json()
    finally:
        await engine.aclose()
    assert health["configVersion"] == identity
