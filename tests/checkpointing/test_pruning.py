"""Pruning a conversation's checkpoints with undo on, through the Python API on both backends:
what undo needs stays, nothing else does (on PostgreSQL: no blob that no kept checkpoint uses),
and the conversation carries on."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from convengine.db import parse_database_url
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

UNUSED_BLOBS = (
    "SELECT count(*) FROM checkpoint_blobs b WHERE b.thread_id = :t AND NOT EXISTS (SELECT 1 FROM checkpoints c "
    "CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v WHERE c.thread_id = b.thread_id "
    "AND c.checkpoint_ns = b.checkpoint_ns AND v.key = b.channel AND v.value = b.version)"
)


async def test_pruning_keeps_what_undo_needs_and_no_unused_blob(db_url: str) -> None:
    data = pack(settings={"conversation_memory": {"undo_depth": 2}, "checkpoint_prune_every": 3})
    async with engine_on(db_url, data) as engine:
        cid = str(uuid.uuid4())
        for i in range(9):
            await engine.aprocess("hello" if i % 2 else f"loan {i}", cid)
        state = await engine.astate(cid)  # waits for the prune that followed turn 9
        chain = [c async for c in engine.graph.checkpointer.alist({"configurable": {"thread_id": cid}})]
        assert len(chain) == 3  # the head and the two earlier states undo may go back to
        if engine.is_postgres:
            url = parse_database_url(db_url).sync_url
            with sa.create_engine(url).connect() as conn:
                assert conn.execute(sa.text(UNUSED_BLOBS), {"t": cid}).scalar_one() == 0
        await engine.aundo(cid)
        await engine.aundo(cid)
        assert (await engine.astate(cid))["turn"] == state["turn"] - 2
        assert (await engine.aprocess("hello", cid)).turn == state["turn"] - 1
