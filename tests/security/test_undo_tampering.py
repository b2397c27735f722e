"""Stored checkpoints of an undo chain are untrusted: edited metadata is refused, never followed elsewhere.

Attack (failed before the fix): the head checkpoint's undo metadata (JSON in the checkpoints table on
both backends) rewritten to wrong types (``depth: "x"``, ``before: {...}``, ``forward: 5``,
``step: "x"``) made undo, redo or the next turn fail with a raw ValueError/TypeError or a driver
error; a 100,000-entry ``forward`` list made every undo copy it and pruning fetch each entry.
Channel values of the wrong type (``turn: "abc"``, ``context: [1, 2]``, ``payload: "x"``...) made
undo, redo, the next turn or the state read fail the same raw ways (a sqlite3 binding error for an
``intent`` object). Now every read checks the metadata's and the state's shape and refuses an
altered checkpoint with CHECKPOINT_REJECTED. References to another conversation's checkpoints and cycles lead nowhere
else: lookups stay within the conversation's own thread and every chain walk is bounded.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import ormsgpack
import pytest
import sqlalchemy as sa

from convengine.catalog.errors import ConvEngineError
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from tests.security.world import assert_unchanged

pytestmark = pytest.mark.asyncio
ECHO = {
    "settings": {"checkpoint_prune_every": 1},
    "ce_intent": [{"intent_code": "ECHO", "description": "echo"}],
    "ce_intent_classifier": [{"intent_code": "ECHO", "rule_type": "REGEX", "pattern": ".*", "priority": 1}],
    "ce_response": [{"response_id": 1, "intent_code": "ECHO", "state_code": "UNKNOWN", "response_type": "EXACT",
                     "exact_text": "You said: {{user_input}}"}],
}
SAFE_CODES = {"CHECKPOINT_REJECTED", "NOTHING_TO_UNDO", "NOTHING_TO_REDO", "UNDO_FORBIDDEN"}
BYSTANDER_TEXT = "bystander private words"


def undo_info(**changes: Any) -> Any:
    def change(metadata: dict[str, Any], others: dict[str, str]) -> dict[str, Any]:
        info = dict(metadata["convengine_undo"])
        for key, value in changes.items():
            info[key] = value(others) if callable(value) else value
        return {**metadata, "convengine_undo": info}
    return change


def metadata_key(key: str, value: Any) -> Any:
    return lambda metadata, others: {**metadata, key: value}


TAMPERINGS: dict[str, Any] = {
    "depth a string": undo_info(depth="x"),
    "depth huge": undo_info(depth=10**30),
    "depth negative": undo_info(depth=-7),
    "before an object": undo_info(before={"thread_id": "other"}),
    "before another conversation's checkpoint": undo_info(before=lambda o: o["bystander"]),
    "forward another conversation's checkpoint": undo_info(forward=lambda o: [o["bystander"]]),
    "forward a number": undo_info(forward=5),
    "forward huge": undo_info(forward=lambda o: [o["head"]] * 100_000),
    "before itself (a cycle)": undo_info(before=lambda o: o["head"]),
    "forward itself (a cycle)": undo_info(forward=lambda o: [o["head"]]),
    "step a string": metadata_key("step", "x"),
    "step huge": metadata_key("step", 10**40),
    "turn id an object": metadata_key("convengine_turn", {"x": 1}),
    "metadata a list": lambda metadata, others: [metadata],
}


def head(url: str, cid: str) -> tuple[str, Any]:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = :t AND "
                                       "checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"), {"t": cid}).one()
    finally:
        engine.dispose()
    metadata = row[1] if isinstance(row[1], dict) else json.loads(row[1])
    return str(row[0]), metadata


def rewrite(url: str, cid: str, checkpoint_id: str, metadata: Any) -> None:
    engine = create_sync_engine(parse_database_url(url))
    cast = "CAST(:m AS jsonb)" if engine.dialect.name == "postgresql" else ":m"
    try:
        with engine.begin() as conn:
            changed = conn.execute(sa.text(f"UPDATE checkpoints SET metadata = {cast} WHERE thread_id = :t AND "
                                           "checkpoint_id = :c"), {"m": json.dumps(metadata), "t": cid,
                                                                   "c": checkpoint_id})
            assert changed.rowcount == 1
    finally:
        engine.dispose()


async def tampered_conversation(engine: Engine, url: str, how: Any) -> tuple[str, str]:
    bystander = await engine.aprocess(BYSTANDER_TEXT)
    cid = (await engine.aprocess("one")).conversation_id
    for text in ("two", "three"):
        await engine.aprocess(text, cid)
    await engine.aundo(cid)  # the head now carries undo metadata
    head_id, metadata = head(url, cid)
    others = {"head": head_id, "bystander": head(url, bystander.conversation_id)[0]}
    rewrite(url, cid, head_id, how(metadata, others))
    return cid, bystander.conversation_id


@pytest.mark.parametrize("name", list(TAMPERINGS))
async def test_tampered_undo_metadata_is_refused(db_url: str, world: Any, name: str) -> None:
    engine = await Engine.aopen(db_url, pack=ECHO)
    try:
        cid, bystander = await tampered_conversation(engine, db_url, TAMPERINGS[name])
        before = world(attacker=cid)
        for attempt in (lambda: engine.aundo(cid), lambda: engine.aredo(cid), lambda: engine.aundo(cid),
                        lambda: engine.astate(cid), lambda: engine.aprocess("four", cid)):
            try:
                outcome = await attempt()
            except ConvEngineError as refused:
                assert refused.code.value in SAFE_CODES, (name, refused.code, refused.message)
                continue
            assert BYSTANDER_TEXT not in repr(outcome), name  # never another conversation's state
        assert_unchanged(before, world(attacker=cid))
        assert BYSTANDER_TEXT not in repr(await engine.ahistory(cid))
        after = await engine.aprocess("still here", bystander)  # the other conversation carries on
        assert after.turn == 2 and after.text == "You said: still here"
    finally:
        await engine.aclose()


async def test_tampered_undo_metadata_over_http(db_url: str, serve: Any) -> None:
    engine = await Engine.aopen(db_url, pack=ECHO)
    try:
        cid, bystander = await tampered_conversation(engine, db_url, TAMPERINGS["depth a string"])
    finally:
        await engine.aclose()
    server = serve(pack=None)  # the database as the engine above left it
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        for path in ("undo", "redo"):
            answer = await client.post(f"/api/v1/conversation/{cid}/{path}")
            # the engine's answer for a corrupted conversation (500, as for the turn), not an unhandled error
            assert answer.json()["errorCode"] == "CHECKPOINT_REJECTED", answer.text
        reply = (await client.post("/api/v1/conversation/message", json={"message": "x", "conversationId": cid})).json()
        assert reply["success"] is False and reply["errorCode"] == "CHECKPOINT_REJECTED"
        other = await client.post("/api/v1/conversation/message", json={"message": "ok", "conversationId": bystander})
        assert other.status_code == 200 and other.json()["success"] is True


CHANNELS: dict[str, tuple[str, Any]] = {
    "turn a string": ("turn", "abc"),
    "turn past any INTEGER": ("turn", 10**12),
    "turn a list": ("turn", [1]),
    "context a list": ("context", [1, 2]),
    "intent an object": ("intent", {"a": 1}),
    "state a number": ("state", 5),
    "payload a string": ("payload", "x"),
    "input_params a list": ("input_params", [1]),
    "recent_turns of numbers": ("recent_turns", [1, 2]),
}


def rewrite_channel(url: str, cid: str, channel: str, value: Any) -> None:
    """Set ``channel`` in every stored checkpoint of the conversation, as someone with database access could."""
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                inline = conn.execute(sa.text(
                    "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, ARRAY['channel_values', :ch], "
                    "CAST(:v AS jsonb)) WHERE thread_id = :t AND jsonb_exists(checkpoint->'channel_values', :ch)"),
                    {"ch": channel, "v": json.dumps(value), "t": cid}).rowcount
                blobs = conn.execute(sa.text("UPDATE checkpoint_blobs SET type = 'json', blob = :b WHERE thread_id = :t "
                                             "AND channel = :ch"),
                                     {"b": json.dumps(value).encode(), "t": cid, "ch": channel}).rowcount
                assert inline or blobs
                return
            rows = conn.execute(sa.text("SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = :t"),
                                {"t": cid}).all()
            for checkpoint_id, blob in rows:
                data = ormsgpack.unpackb(blob)
                data["channel_values"][channel] = value
                conn.execute(sa.text("UPDATE checkpoints SET checkpoint = :b WHERE thread_id = :t AND "
                                     "checkpoint_id = :c"), {"b": ormsgpack.packb(data), "t": cid, "c": checkpoint_id})
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", list(CHANNELS))
async def test_tampered_channel_values_are_refused(db_url: str, world: Any, name: str) -> None:
    channel, value = CHANNELS[name]
    engine = await Engine.aopen(db_url, pack=ECHO)
    try:
        cid, bystander = await tampered_conversation(engine, db_url, lambda metadata, others: metadata)
        rewrite_channel(db_url, cid, channel, value)
        before = world(attacker=cid)
        for attempt in (lambda: engine.aundo(cid), lambda: engine.aredo(cid), lambda: engine.astate(cid),
                        lambda: engine.aprocess("four", cid)):
            with pytest.raises(ConvEngineError) as refused:
                await attempt()
            assert refused.value.code.value == "CHECKPOINT_REJECTED", (name, refused.value.message)
            assert repr(channel) in refused.value.message or "turn of" in refused.value.message
        assert_unchanged(before, world(attacker=cid))
        assert (await engine.aprocess("still here", bystander)).turn == 2
    finally:
        await engine.aclose()


def count_checkpoints(url: str, cid: str) -> int:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM checkpoints WHERE thread_id = :t"), {"t": cid}).one()[0])
    finally:
        engine.dispose()


@pytest.mark.parametrize("stored", ["{not json", "[" * 100_000 + "]" * 100_000, "42"])
async def test_pruning_refuses_stored_metadata_that_is_no_json_object(sqlite_db_url: str, stored: str) -> None:
    """Pruning reads each checkpoint's metadata text itself (SQLite stores it as text): text that is not
    JSON, JSON nested past Python's recursion limit or no object stops the prune, which deletes nothing;
    turns go on or are refused with a code, never a raw error."""
    engine = await Engine.aopen(sqlite_db_url, pack=ECHO)
    try:
        bystander = await engine.aprocess(BYSTANDER_TEXT)
        cid = (await engine.aprocess("one")).conversation_id
        for text in ("two", "three", "four", "five", "six", "seven", "eight"):  # past undo_depth: prunes delete
            await engine.aprocess(text, cid)
        head_id, _ = head(sqlite_db_url, cid)
        sync = create_sync_engine(parse_database_url(sqlite_db_url))
        with sync.begin() as conn:
            conn.execute(sa.text("UPDATE checkpoints SET metadata = :m WHERE thread_id = :t AND checkpoint_id = :c"),
                         {"m": stored.encode(), "t": cid, "c": head_id})
        sync.dispose()
        kept = count_checkpoints(sqlite_db_url, cid)
        outcomes = []
        for text in ("nine", "ten"):  # each commit starts a prune (checkpoint_prune_every: 1); a turn waits for it
            try:
                outcomes.append((await engine.aprocess(text, cid)).turn)
            except ConvEngineError as refused:
                assert refused.code.value in SAFE_CODES, refused.message
                outcomes.append(refused.code.value)
        assert count_checkpoints(sqlite_db_url, cid) == kept + sum(isinstance(o, int) for o in outcomes), outcomes
        after = await engine.aprocess("still here", bystander.conversation_id)
        assert after.turn == 2 and after.text == "You said: still here"
    finally:
        await engine.aclose()


def rewrite_versions(url: str, cid: str) -> None:
    """Replace every channel version of the conversation's checkpoints with text LangGraph cannot count from."""
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                assert conn.execute(sa.text(
                    "UPDATE checkpoints SET checkpoint = jsonb_set(checkpoint, '{channel_versions}', (SELECT "
                    "jsonb_object_agg(key, 'x.y') FROM jsonb_each(checkpoint->'channel_versions'))) "
                    "WHERE thread_id = :t"), {"t": cid}).rowcount
                return
            rows = conn.execute(sa.text("SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = :t"),
                                {"t": cid}).all()
            for checkpoint_id, blob in rows:
                data = ormsgpack.unpackb(blob)
                data["channel_versions"] = {k: "x.y" for k in data["channel_versions"]}
                conn.execute(sa.text("UPDATE checkpoints SET checkpoint = :b WHERE thread_id = :t AND "
                                     "checkpoint_id = :c"), {"b": ormsgpack.packb(data), "t": cid, "c": checkpoint_id})
    finally:
        engine.dispose()


async def test_tampered_channel_versions_are_refused_not_an_internal_error(db_url: str, world: Any) -> None:
    engine = await Engine.aopen(db_url, pack=ECHO)
    try:
        cid, bystander = await tampered_conversation(engine, db_url, lambda metadata, others: metadata)
        rewrite_versions(db_url, cid)
        before = world(attacker=cid)
        for attempt in (lambda: engine.aprocess("four", cid), lambda: engine.aundo(cid)):
            with pytest.raises(ConvEngineError) as refused:
                await attempt()
            assert refused.value.code.value == "CHECKPOINT_REJECTED", refused.value.message
            assert "channel versions" in refused.value.message
        assert_unchanged(before, world(attacker=cid))
        assert (await engine.aprocess("still here", bystander)).turn == 2
    finally:
        await engine.aclose()
