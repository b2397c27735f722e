"""The Python API: sync and async use (also inside a running loop), typed errors, the chat CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from convengine.catalog.errors import (
    ConfigValidationError,
    ConversationNotFoundError,
    ErrorCode,
    InvalidConversationIdError,
    InvalidInputError,
    MessageTooLargeError,
)
from convengine.engine import Engine
from tests.conftest import EXAMPLES
from tests.helpers import pack


def test_sync_api_round_trip(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        result = engine.process("hello")
        assert (result.intent, result.state, result.text) == ("GREETING", "IDLE", "Hello there")
        assert engine.history(result.conversation_id)[0]["user_input"] == "hello"
        assert engine.audit(result.conversation_id)[0].stage == "STEP_ENTER"
        trace = engine.trace(result.conversation_id)
        assert trace["steps"][0]["step"] == "load_or_create_conversation"
        assert all(s["status"] == "OK" for s in trace["steps"])


@pytest.mark.asyncio
async def test_the_sync_api_works_inside_a_running_event_loop(db_url: str) -> None:
    # What Jupyter does: the notebook's loop is running while the user calls the sync API.
    asyncio.get_running_loop()
    engine = Engine.open(db_url, pack=pack())
    try:
        result = engine.process("hello")
        again = await engine.aprocess("loan", result.conversation_id)
        assert again.turn == 2 and again.intent == "LOAN"
    finally:
        engine.close()


BAD_CALLS = [
    ({"message": b"hello"}, InvalidInputError, "message must be text"),
    ({"message": 123}, InvalidInputError, "message must be text"),
    ({"message": "a\x00b"}, InvalidInputError, "NUL character"),
    ({"message": "bad \ud800 surrogate"}, InvalidInputError, "not valid Unicode"),
    ({"message": "x" * 100_001}, MessageTooLargeError, "limit is 100000"),
    ({"message": "hi", "conversation_id": "not-a-uuid"}, InvalidConversationIdError, "is not a UUID"),
    ({"message": "hi", "conversation_id": 42}, InvalidConversationIdError, "must be a UUID string"),
    ({"message": "hi", "input_params": [1, 2]}, InvalidInputError, "input_params must be an object"),
    ({"message": "hi", "input_params": {"when": object()}}, InvalidInputError, "input_params must be JSON"),
    ({"message": "hi", "input_params": {1: "x"}}, InvalidInputError, "keys must be strings"),
    ({"message": "hi", "reset": "yes"}, InvalidInputError, "reset must be true or false"),
]


@pytest.mark.parametrize(("kwargs", "error", "text"), BAD_CALLS)
def test_caller_mistakes_raise_typed_errors(sqlite_engine: Engine, kwargs: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text) as info:
        sqlite_engine.process(**kwargs)
    assert not info.value.recoverable


def test_an_empty_message_is_fine_with_reset(sqlite_engine: Engine) -> None:
    result = sqlite_engine.process("", reset=True)
    assert result.intent == "UNKNOWN"


def test_unknown_conversations_are_reported(sqlite_engine: Engine) -> None:
    cid = str(uuid.uuid4())
    for read in (sqlite_engine.audit, sqlite_engine.history, sqlite_engine.state):
        with pytest.raises(ConversationNotFoundError) as info:
            read(cid)
        assert info.value.code == ErrorCode.CONVERSATION_NOT_FOUND
    result = sqlite_engine.process("hello", cid)  # an unknown id is created on its first message
    assert result.conversation_id == cid


def test_uuid_objects_and_case_are_normalised(sqlite_engine: Engine) -> None:
    cid = uuid.uuid4()
    first = sqlite_engine.process("hello", cid)  # type: ignore[arg-type]
    assert first.conversation_id == str(cid)
    second = sqlite_engine.process("loan", str(cid).upper())
    assert second.turn == 2


def test_an_invalid_pack_is_rejected_at_open(tmp_path: Path) -> None:
    bad = {"ce_policy": [{"policy_id": 3, "rule_type": "REGEX", "pattern": "(", "response_text": "x"}]}
    with pytest.raises(ConfigValidationError, match=r"ce_policy\[3\]\.pattern"):
        Engine.open(f"sqlite:///{tmp_path / 'x.db'}", pack=bad)


def test_reload_picks_up_new_rows_and_keeps_the_old_snapshot_on_error(tmp_path: Path) -> None:
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Engine.open(url, pack=pack()) as engine:
        old = engine.snapshot
        db = sa.create_engine(f"sqlite:///{tmp_path / 'r.db'}")
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE ce_response SET exact_text = 'Hi again' WHERE exact_text = 'Hello there'"))
        assert engine.reload() is not old
        assert engine.process("hello").text == "Hi again"
        with db.begin() as conn:
            conn.execute(sa.text("UPDATE ce_intent_classifier SET pattern = '(' WHERE intent_code = 'GREETING'"))
        current = engine.snapshot
        with pytest.raises(ConfigValidationError, match="ce_intent_classifier"):
            engine.reload()
        assert engine.snapshot is current
        assert engine.process("loan").intent == "LOAN"
        db.dispose()


def test_settings_keywords_and_unknown_settings(tmp_path: Path) -> None:
    from convengine.catalog.errors import ConfigError

    url = f"sqlite:///{tmp_path / 's.db'}"
    with (Engine.open(url, pack=pack(), api={"max_message_chars": 10}) as engine,
          pytest.raises(MessageTooLargeError, match="limit is 10")):
        engine.process("a very long message")
    with pytest.raises(ConfigError, match="colour"):
        Engine.open(url, colour="blue")


def run_chat(*args: str, stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convengine.cli", "chat", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=cwd, check=False)  # the tests assert the exit code


def test_chat_reads_piped_stdin_on_the_embedded_default(tmp_path: Path) -> None:
    done = run_chat(stdin="hello\ncancel my order\nit was late\nyes\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "GREETING / IDLE" in out and "CANCEL_ORDER / CONFIRM" in out
    assert "Done: order A-1001 is cancelled" in out
    assert (tmp_path / "convengine.db").exists()  # sqlite:///convengine.db in the working directory


def test_chat_shows_the_trace_and_continues_a_conversation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    cid = str(uuid.uuid4())
    first = run_chat("--url", url, "--conversation", cid, "--trace", stdin="cancel my order\n", cwd=tmp_path)
    assert "intent_resolution" in first.stdout and "INTENT_CLASSIFICATION_MATCHED" in first.stdout
    second = run_chat("--url", url, "--conversation", cid, stdin="it arrived damaged\n", cwd=tmp_path)
    assert "CANCEL_ORDER / CONFIRM  (turn 2)" in second.stdout


def test_chat_with_an_explicit_pack(tmp_path: Path) -> None:
    done = run_chat("--url", f"sqlite:///{tmp_path / 'p.db'}", "--pack", str(EXAMPLES / "support_desk.yaml"),
                    stdin="where is my order\n", cwd=tmp_path)
    assert "ORDER_STATUS / IDLE" in done.stdout


def test_chat_runs_the_loan_demo_with_its_scripted_model(tmp_path: Path) -> None:
    done = run_chat("--url", f"sqlite:///{tmp_path / 'loan.db'}", "--pack", str(EXAMPLES / "loan_application.yaml"),
                    "--scripted", str(EXAMPLES / "loan_application_scripted.py"),
                    stdin="I need a loan\nmy name is Ann Lee\n25k over 3 years\nchange the amount to 30000\nyes\n",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Ann Lee would like $30000 over 36 months" in done.stdout
    assert "Submitted! Your application number is LN-1001." in done.stdout
