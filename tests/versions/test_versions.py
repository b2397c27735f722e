"""Versioned configuration through the Python API, on SQLite and PostgreSQL: pinned conversations,
publishing gated by conversation tests, rollback, the draft simulator, diffs, channels."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from convengine.catalog.errors import ConfigValidationError, ErrorCode, InvalidInputError
from convengine.config_loader import export_pack
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from convengine.versions import PublishRefusedError, VersionNotFoundError
from convengine.versions.serving import VERSION_STAGE
from tests.helpers import pack

WARM = "Hi, welcome back"


def warm_pack(text: str = WARM) -> dict[str, Any]:
    changed = pack()
    changed["ce_response"][0]["exact_text"] = text
    return changed


def versions_of(engine: Engine, conversation_id: str) -> list[tuple[int, str]]:
    return [(e.payload["version"], e.payload["reason"]) for e in engine.audit(conversation_id)
            if e.stage == VERSION_STAGE]


def live_greeting(db_url: str) -> str:
    engine = create_sync_engine(parse_database_url(db_url))
    try:
        rows = export_pack(engine)["ce_response"]
    finally:
        engine.dispose()
    return next(r["exact_text"] for r in rows if r.get("intent_code") == "GREETING")


def write_tests(folder: Path, greeting: str = "Hello there") -> Path:
    """A pack file and its conversation tests: the greeting must stay ``greeting``, a loan must start."""
    (folder / "greet.yaml").write_text(yaml.safe_dump(pack()), encoding="utf-8")
    spec = {"pack": "greet.yaml", "tests": [
        {"name": "the greeting is kept", "turns": [{"user": "hello", "expect": {"payload": greeting}}]},
        {"name": "a loan starts", "turns": [{"user": "I need a loan", "expect": {"intent": "LOAN",
                                                                                 "payload": "Loan started"}}]},
    ]}
    path = folder / "greet.conv.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_a_conversation_keeps_its_version_after_a_publish_and_new_ones_get_the_new_one(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        first = engine.process("hello")
        v1 = engine.versions.published_version
        draft = engine.versions.draft(warm_pack(), author="ann", message="a warmer greeting")
        published = engine.versions.publish(author="ann", message="ship it")
        assert published.version.number == draft.number == engine.versions.published_version != v1

        assert engine.process("hello", first.conversation_id).text == "Hello there"
        fresh = engine.process("hello")
        assert fresh.text == WARM
        assert versions_of(engine, first.conversation_id) == [(v1, "channel"), (v1, "pinned")]
        assert versions_of(engine, fresh.conversation_id) == [(draft.number, "channel")]
        assert live_greeting(db_url) == WARM  # ConvEngine's tables mirror the published version

        restarted = engine.process("hello", first.conversation_id, reset=True)
        assert restarted.text == WARM and versions_of(engine, first.conversation_id)[-1] == (draft.number, "channel")
        info = engine.versions.info(draft.number)
        assert (info.author, info.message, info.parent) == ("ann", "a warmer greeting", v1)
        assert len(info.hash) == 64 and info.hash != engine.versions.info(v1).hash


def test_another_process_serves_the_published_version_to_new_conversations_only(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as writer, Engine.open(db_url) as reader:
        pinned = reader.process("hello")
        writer.versions.draft(warm_pack(), author="ann")
        writer.versions.publish(author="ann")
        assert reader.process("hello", pinned.conversation_id).text == "Hello there"
        assert _eventually(lambda: reader.process("hello").text) == WARM


def _eventually(read: Any, attempts: int = 20) -> Any:
    import time

    value = None
    for _ in range(attempts):
        value = read()
        if value == WARM:
            return value
        time.sleep(0.05)
    return value


def test_publish_is_refused_naming_the_failing_conversation_test(db_url: str, tmp_path: Path) -> None:
    tests = write_tests(tmp_path)
    with Engine.open(db_url, pack=pack(), conversation_tests=[tests]) as engine:
        v1 = engine.versions.published_version
        draft = engine.versions.draft(warm_pack(), author="ann")
        with pytest.raises(PublishRefusedError) as refused:
            engine.versions.publish(author="ann")
        assert refused.value.code is ErrorCode.PUBLISH_REFUSED
        assert refused.value.details["failed"] == ["greet.conv.yaml: the greeting is kept"]
        assert "the greeting is kept" in refused.value.message and "a loan starts" not in refused.value.message
        assert engine.versions.published_version == v1 and engine.versions.draft_version == draft.number
        assert engine.process("hello").text == "Hello there" and live_greeting(db_url) == "Hello there"

        loan = copy.deepcopy(pack())
        loan["ce_response"][2]["exact_text"] = "Sorry, could you say that again?"
        passing = engine.versions.draft(loan, author="ann", message="clearer fallback")
        done = engine.versions.publish(author="ann")
        assert done.version.number == passing.number
        assert done.tests_passed == ("greet.conv.yaml: the greeting is kept", "greet.conv.yaml: a loan starts")
        assert engine.versions.history("production")[-1]["testsRun"] == 2


def test_an_invalid_draft_is_refused_whole_listing_the_violations(db_url: str) -> None:
    broken = pack(ce_rule=[{"phase": "POST_AGENT_INTENT", "intent_code": "GREETING", "rule_type": "EXACT",
                            "match_pattern": "x", "action": "NO_SUCH_ACTION", "priority": 1}])
    with Engine.open(db_url, pack=pack()) as engine:
        before = engine.versions.list()
        with pytest.raises(ConfigValidationError) as refused:
            engine.versions.draft(broken, author="ann")
        assert "NO_SUCH_ACTION" in refused.value.message
        assert engine.versions.list() == before and engine.process("hello").text == "Hello there"


def test_rollback_restores_the_earlier_behaviour_for_new_conversations(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        v1 = engine.versions.published_version
        engine.versions.draft(warm_pack(), author="ann")
        v2 = engine.versions.publish(author="ann").version.number
        on_v2 = engine.process("hello")
        assert on_v2.text == WARM

        rolled = engine.versions.rollback(v1, author="bob", message="customers preferred it")
        assert rolled.action == "ROLLBACK" and engine.versions.published_version == v1
        assert engine.process("hello").text == "Hello there" and live_greeting(db_url) == "Hello there"
        assert engine.process("hello", on_v2.conversation_id).text == WARM  # pinned to v2
        assert [h["action"] for h in engine.versions.history("production")][-2:] == ["PUBLISH", "ROLLBACK"]
        assert len(engine.versions.list()) == v2  # a rollback makes no new version

        with pytest.raises(VersionNotFoundError):
            engine.versions.rollback(99, author="bob")
        never = engine.versions.draft(warm_pack("never served"), author="ann").number
        with pytest.raises(VersionNotFoundError, match="never served"):
            engine.versions.rollback(never, author="bob")


def test_the_draft_simulator_runs_the_draft_without_changing_what_users_get(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        v1 = engine.versions.published_version
        draft = engine.versions.draft(warm_pack(), author="ann")
        tried = engine.process("hello", draft=True)
        assert tried.text == WARM
        assert versions_of(engine, tried.conversation_id) == [(draft.number, "draft")]
        assert engine.process("hello", tried.conversation_id).text == WARM  # the simulated conversation stays
        assert engine.process("hello").text == "Hello there"
        assert engine.versions.published_version == v1 and live_greeting(db_url) == "Hello there"
        assert engine.process("hello", version=v1).text == "Hello there"

        with pytest.raises(InvalidInputError):
            engine.process("hello", draft=True, version=v1)
        with pytest.raises(InvalidInputError):
            engine.process("hello", version=0)
        with pytest.raises(VersionNotFoundError):
            engine.process("hello", version=999)
        with pytest.raises(VersionNotFoundError, match="numbered 1 to"):
            engine.versions.info(2**64)


def test_diff_lists_the_changed_rows_table_by_table(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        v1 = engine.versions.published_version
        content = engine.versions.content(v1)
        greeting = next(r for r in content["ce_response"] if r.get("intent_code") == "GREETING")
        fallback = next(r for r in content["ce_response"] if r.get("priority") == 500)
        edited = engine.versions.edit(
            upsert={"ce_response": [{"response_id": greeting["response_id"], "exact_text": WARM}],
                    "ce_intent": [{"intent_code": "BYE", "description": "goodbye"}]},
            delete={"ce_response": [fallback["response_id"]]}, author="ann", message="three edits")
        tables = {d.table: d for d in engine.versions.diff(v1, edited.number)}
        assert set(tables) == {"ce_response", "ce_intent"}
        changed, removed = tables["ce_response"].changes
        assert (changed.kind, changed.key) == ("changed", greeting["response_id"])
        assert dict(changed.columns) == {"exact_text": ("Hello there", WARM)}
        assert (removed.kind, removed.key, removed.before["exact_text"]) == (
            "removed", fallback["response_id"], "Fallback in {{state}}")
        assert [(c.kind, c.key) for c in tables["ce_intent"].changes] == [("added", "BYE")]
        assert engine.versions.diff(v1, v1) == []

        with pytest.raises(InvalidInputError, match="no row"):
            engine.versions.edit(delete={"ce_intent": ["NOT_THERE"]})
        with pytest.raises(InvalidInputError, match="unknown table"):
            engine.versions.edit(upsert={"ce_conversation": [{}]})


def test_channels_serve_their_own_versions_side_by_side(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as production:
        draft = production.versions.draft(warm_pack(), author="ann")
        production.versions.point("staging", draft.number, author="ann")
        with Engine.open(db_url, channel="staging") as staging:
            assert staging.process("hello").text == WARM
            assert production.process("hello").text == "Hello there"
        with pytest.raises(VersionNotFoundError, match="no channel 'qa'"):
            Engine.open(db_url, channel="qa")
        with pytest.raises(InvalidInputError, match="reserved"):
            production.versions.point("draft", draft.number)
        with pytest.raises(InvalidInputError, match="channel name"):
            production.versions.point("Prod; DROP", draft.number)
        names = {c.name: c.version for c in production.versions.channels()}
        assert names["staging"] == draft.number and names["production"] != draft.number


def test_the_latest_policy_moves_running_conversations_at_their_next_turn(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        v1 = engine.versions.published_version
        engine.versions.point("production", v1, migration="latest", author="ops")
        running = engine.process("hello")
        engine.versions.draft(warm_pack(), author="ann")
        engine.versions.publish(author="ann")
        assert engine.process("hello", running.conversation_id).text == WARM
        with pytest.raises(InvalidInputError, match="migration"):
            engine.versions.point("production", v1, migration="sometimes")


def test_a_direct_edit_of_the_control_tables_becomes_a_version_on_reload(db_url: str) -> None:
    with Engine.open(db_url, pack=pack()) as engine:
        before = len(engine.versions.list())
        sql = create_sync_engine(parse_database_url(db_url))
        try:
            with sql.begin() as conn:
                conn.execute(sa.text("UPDATE ce_response SET exact_text = :t WHERE intent_code = 'GREETING'"),
                             {"t": WARM})
        finally:
            sql.dispose()
        engine.reload()
        versions = engine.versions.list()
        assert len(versions) == before + 1 and versions[-1].author == "database"
        assert engine.versions.published_version == versions[-1].number
        assert engine.process("hello").text == WARM
        engine.reload()  # nothing changed since: no new version
        assert len(engine.versions.list()) == before + 1
