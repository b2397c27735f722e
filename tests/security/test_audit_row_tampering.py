"""Stored audit rows are untrusted when read back: a ``ce_audit_turn`` row altered in the database
(a decompression bomb, bytes that are not a packed trail, a trail of the wrong shape) is refused
with ``AUDIT_ROW_REJECTED`` naming the row, over the Python API and HTTP, and a bomb is not
inflated past ``MAX_UNPACKED_BYTES``."""

from __future__ import annotations

import json
import tracemalloc
import zlib

import pytest
import sqlalchemy as sa

from convengine import Engine
from convengine.api.app import create_app
from convengine.audit.packing import MAX_UNPACKED_BYTES, ZDICT
from convengine.catalog.errors import ConvEngineError, ErrorCode
from convengine.db import create_sync_engine, parse_database_url
from tests.conftest import PACKS
from tests.servers import in_process

pytestmark = pytest.mark.asyncio


def _deflate(data: bytes) -> bytes:
    deflate = zlib.compressobj(6, zdict=ZDICT)
    return deflate.compress(data) + deflate.flush()


def _bomb() -> bytes:
    """A valid packed value that inflates to four times the limit (fed in 1 MiB pieces)."""
    deflate = zlib.compressobj(9, zdict=ZDICT)
    parts = [deflate.compress(b"[")]
    piece = b" " * (1 << 20)
    parts += [deflate.compress(piece) for _ in range(4 * MAX_UNPACKED_BYTES >> 20)]
    return b"".join([*parts, deflate.compress(b"]"), deflate.flush()])


TAMPERED = {
    "bomb": b"",
    "not zlib": b"\x00not a packed trail",
    "truncated": _deflate(json.dumps({"v": 1, "t": None, "e": []}).encode())[:-6],
    "other format": _deflate(json.dumps({"v": 99, "e": []}).encode()),
    "bad event": _deflate(json.dumps({"v": 1, "t": None, "e": [["USER_INPUT", "soon", {}, None]]}).encode()),
    "bad meta": _deflate(json.dumps({"v": 1, "t": None, "e": [["USER_INPUT", 0, {}, "x"]]}).encode()),
}


def _overwrite(url: str, value: bytes) -> int:
    db = create_sync_engine(parse_database_url(url))
    try:
        with db.begin() as conn:
            row_id = conn.execute(sa.text("SELECT max(audit_turn_id) FROM ce_audit_turn")).scalar_one()
            conn.execute(sa.text("UPDATE ce_audit_turn SET events = :v WHERE audit_turn_id = :i"),
                         {"v": value, "i": row_id})
            return int(row_id)
    finally:
        db.dispose()


@pytest.mark.parametrize("kind", list(TAMPERED))
async def test_an_altered_audit_row_is_refused_by_name(db_url: str, kind: str) -> None:
    engine = await Engine.aopen(db_url, pack=PACKS / "api_pack.yaml")
    try:
        cid = (await engine.aprocess("hello")).conversation_id
        row_id = _overwrite(db_url, _bomb() if kind == "bomb" else TAMPERED[kind])
        tracemalloc.start()
        try:
            with pytest.raises(ConvEngineError) as refused:
                await engine.aaudit(cid)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        async with in_process(create_app(engine=engine)) as client:
            reply = await client.get(f"/api/v1/conversation/audit/{cid}")
    finally:
        await engine.aclose()
    assert refused.value.code is ErrorCode.AUDIT_ROW_REJECTED
    assert f"ce_audit_turn row {row_id}" in refused.value.message
    assert peak < 3 * MAX_UNPACKED_BYTES  # inflated whole, the bomb would take 4x the limit
    assert reply.status_code == 500
    assert reply.json()["errorCode"] == "AUDIT_ROW_REJECTED"
