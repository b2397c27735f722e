"""Stored bytes are untrusted: a rewritten checkpoint never makes the server call anything.

Attack: a checkpoint blob rewritten to a msgpack extension naming ``os.system`` ran that call
in the server on the conversation's next turn (the serializer rebuilt objects of any module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import ormsgpack
import pytest
import sqlalchemy as sa

from convengine.catalog.errors import UnsafeCheckpointError
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from tests.conftest import EXAMPLES
from tests.security.world import assert_unchanged

pytestmark = pytest.mark.asyncio
EXT_CONSTRUCTOR_POS_ARGS = 1  # LangGraph's msgpack extension "module, name, args"


def evil(marker: Path) -> ormsgpack.Ext:
    return ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [f"touch {marker}"])))


def plant(url: str, conversation_id: str, marker: Path) -> None:
    """Rewrite the conversation's stored ``context`` channel, as someone with database access could."""
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.begin() as conn:
            (_plant_postgres if conn.dialect.name == "postgresql" else _plant_sqlite)(conn, conversation_id, marker)
    finally:
        engine.dispose()


def _plant_sqlite(conn: sa.Connection, cid: str, marker: Path) -> None:
    rows = conn.execute(sa.text("SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = :t"),
                        {"t": cid}).all()
    assert rows
    for checkpoint_id, blob in rows:
        data = ormsgpack.unpackb(blob)
        data["channel_values"]["context"] = evil(marker)
        conn.execute(sa.text("UPDATE checkpoints SET checkpoint = :b WHERE thread_id = :t AND checkpoint_id = :c"),
                     {"b": ormsgpack.packb(data), "t": cid, "c": checkpoint_id})


def _plant_postgres(conn: sa.Connection, cid: str, marker: Path) -> None:
    changed = conn.execute(sa.text("UPDATE checkpoint_blobs SET type = 'msgpack', blob = :b WHERE thread_id = :t "
                                   "AND channel = 'context'"), {"b": ormsgpack.packb(evil(marker)), "t": cid})
    assert changed.rowcount


async def test_a_planted_object_is_refused_and_nothing_runs(db_url: str, world: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    writer = await Engine.aopen(db_url, pack=EXAMPLES / "support_desk.yaml")
    try:
        bystander = await writer.aprocess("where is my order")
        victim = await writer.aprocess("hello")
    finally:
        await writer.aclose()
    plant(db_url, victim.conversation_id, marker)
    # another worker (or a restart) reads the stored bytes: the writer's process keeps its own copy
    engine = await Engine.aopen(db_url, pack=EXAMPLES / "support_desk.yaml")
    try:
        before = world(attacker=victim.conversation_id)
        with pytest.raises(UnsafeCheckpointError, match="os.system") as raised:
            await engine.aprocess("hello again", victim.conversation_id)
        assert raised.value.code.value == "CHECKPOINT_REJECTED" and not raised.value.recoverable
        with pytest.raises(UnsafeCheckpointError):
            await engine.astate(victim.conversation_id)
        assert not marker.exists()
        assert_unchanged(before, world(attacker=victim.conversation_id))
        assert (await engine.aprocess("thanks", bystander.conversation_id)).turn == 2  # others carry on
    finally:
        await engine.aclose()


async def test_a_planted_object_over_http(db_url: str, serve: Any, world: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-http"
    server = serve(pack=EXAMPLES / "support_desk.yaml")
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        cid = (await client.post("/api/v1/conversation/message", json={"message": "hello"})).json()["conversationId"]
    plant(db_url, cid, marker)
    other_worker = serve(pack=None)  # a server that did not write the checkpoint reads the planted bytes
    async with httpx.AsyncClient(base_url=other_worker.base, timeout=30) as client:
        before = world(attacker=cid)
        reply = (await client.post("/api/v1/conversation/message",
                                   json={"message": "hello", "conversationId": cid})).json()
        assert reply["success"] is False and reply["errorCode"] == "CHECKPOINT_REJECTED"
        assert not marker.exists()
        assert_unchanged(before, world(attacker=cid))
