"""A conversation exported as a ``.conv.yaml`` test carries no secret, and still replays.

Attack (failed before the fix): a conversation whose inputs, params and replies held an API key
configured through ``${env:}``, a ``password=...`` pair, a bearer token and an ``inputParams.token``
was exported with all of them in clear, into a file meant to be committed next to the pack.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from convengine.console.export import export_conversation
from convengine.engine import Engine

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-live-9f8e7d6c5b4a"
PARAM_TOKEN = "tok-Zq81-x7Lm"
PASSWORD = "hunter2222"
BEARER = "abcdefgh12345"
SECRETS = (API_KEY, PARAM_TOKEN, PASSWORD, BEARER)
PACK: dict[str, Any] = {
    # a secret setting a pack may hold (api.auth is the operator's: tests/security/test_pack_settings_attacks.py)
    "settings": {"mcp": {"db": {"databases": {"reports": "postgresql://reporter:${env:CE_EXPORT_TEST_KEY}@db/reports"}}},
                 "llm": {"log_calls": True}},
    "ce_intent": [{"intent_code": "ECHO", "description": "echo"}],
    "ce_intent_classifier": [{"intent_code": "ECHO", "rule_type": "REGEX", "pattern": ".*", "priority": 1}],
    "ce_response": [{"response_id": 1, "intent_code": "ECHO", "state_code": "UNKNOWN", "response_type": "EXACT",
                     "exact_text": "You said: {{user_input}} (token {{inputParams.token}})"}],
}


@pytest.fixture(autouse=True)
def api_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_EXPORT_TEST_KEY", API_KEY)
    monkeypatch.setenv("CONVENGINE_SECURITY__PACK_ENV_NAMES", '["CE_EXPORT_TEST_KEY"]')  # the operator allows it


async def record(url: str, pack: Path) -> str:
    engine = await Engine.aopen(url, pack=pack)
    try:
        first = await engine.aprocess(f"my key is {API_KEY} and password={PASSWORD}",
                                      input_params={"token": PARAM_TOKEN, "note": f"Bearer {BEARER}"})
        assert API_KEY in first.text and PARAM_TOKEN in first.text  # the reply really held them
        await engine.aprocess("and nothing secret", first.conversation_id, input_params={"token": PARAM_TOKEN})
        return first.conversation_id
    finally:
        await engine.aclose()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CONVENGINE_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "convengine.cli", *args], capture_output=True, text=True,
                          timeout=180, env=env, check=False)


async def test_the_export_holds_no_secret_and_replays(db_url: str, tmp_path: Path) -> None:
    pack = tmp_path / "echo.yaml"
    pack.write_text(yaml.safe_dump(PACK))
    cid = await record(db_url, pack)
    engine = await Engine.aopen(db_url)
    try:
        text = await export_conversation(engine, cid, pack="echo.yaml")
    finally:
        await engine.aclose()
    assert not [s for s in SECRETS if s in text], text
    turn = yaml.safe_load(text)["tests"][0]["turns"][0]
    assert turn["params"]["token"] == "***" and turn["user"] == "my key is *** and password=***"
    assert turn["expect"]["payload"]["equals"] == "You said: my key is *** and password=*** (token ***)"

    output = tmp_path / "replay.conv.yaml"
    done = cli("export-test", cid, "--pack", str(pack), "-o", str(output), "--url", db_url)
    assert done.returncode == 0, done.stderr
    exported = output.read_text()
    assert not [s for s in SECRETS if s in exported], exported
    replay = cli("test", str(output))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "1 passed, 0 failed" in replay.stdout
