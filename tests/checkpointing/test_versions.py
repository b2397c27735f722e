"""Channel versions: the engine writes them half as long as the official savers (a checkpoint carries
one per channel and one per node that saw it), and a conversation whose checkpoints were written with
the official 32-digit versions (every conversation begun before) goes on exactly as a new one does,
undo included (both backends)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from convengine import Engine
from convengine.catalog import state as keys
from convengine.checkpointing.bound import TurnSaver
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

SHORT = re.compile(r"\d{12}\.[0-9a-f]{10}")
MESSAGES = ("hello", "I need a loan", "hello again", "I need a loan")


def saver(engine: Engine) -> TurnSaver:
    checkpointer = engine.graph.checkpointer
    assert isinstance(checkpointer, TurnSaver)
    return checkpointer


async def versions(engine: Engine, cid: str) -> dict[str, str]:
    found = await saver(engine).aget_tuple({"configurable": {"thread_id": cid, "checkpoint_ns": ""}})
    assert found is not None
    return dict(found.checkpoint["channel_versions"])


async def outcome(engine: Engine, cid: str, results: list[Any]) -> dict[str, Any]:
    state = await engine.astate(cid)
    return {"replies": [(r.intent, r.state, r.payload) for r in results], "turn": state.get(keys.TURN),
            "params": state.get(keys.INPUT_PARAMS), "said": [t["user"] for t in state.get("recent_turns", [])]}


async def converse(engine: Engine, official_turns: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The messages, the first ``official_turns`` checkpointed with the official saver's versions; then
    an undo and one more turn."""
    results: list[Any] = []
    cid: str | None = None
    for i, text in enumerate(MESSAGES):
        with monkeypatch.context() as patch:
            if i < official_turns:  # as the engine wrote them before
                patch.setattr(TurnSaver, "get_next_version", lambda self, current, channel:
                              self.shared.get_next_version(current, channel))
            results.append(await engine.aprocess(text, cid, input_params={f"p{i}": i}))
        cid = results[-1].conversation_id
    assert cid is not None
    await engine.aundo(cid)
    results.append(await engine.aprocess("hello", cid, input_params={"after": 1}))
    return await outcome(engine, cid, results)


async def test_the_engine_writes_short_channel_versions(db_url: str) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        await engine.aprocess("I need a loan", cid)
        written = await versions(engine, cid)
        assert written and all(SHORT.fullmatch(v) for v in written.values()), written


async def test_a_conversation_checkpointed_with_the_official_versions_goes_on_as_a_new_one_does(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with engine_on(db_url, pack()) as engine:
        new = await converse(engine, 0, monkeypatch)
        upgraded = await converse(engine, 2, monkeypatch)
    assert upgraded == new
    assert new["said"] == ["hello", "I need a loan", "hello again", "hello"]  # the undone turn is gone
    assert new["params"] == {"p0": 0, "p1": 1, "p2": 2, "after": 1}


async def test_every_version_written_after_the_official_ones_is_greater(db_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async with engine_on(db_url, pack()) as engine:
        with monkeypatch.context() as patch:
            patch.setattr(TurnSaver, "get_next_version", lambda self, current, channel:
                          self.shared.get_next_version(current, channel))
            cid = (await engine.aprocess("hello")).conversation_id
        old = await versions(engine, cid)
        assert all(len(v.split(".")[0]) == 32 for v in old.values())  # the official form
        await engine.aprocess("I need a loan", cid)
        new = await versions(engine, cid)
        changed = {channel for channel in new if new[channel] != old.get(channel)}
        assert changed and all(SHORT.fullmatch(new[c]) and new[c] > max(old.values()) for c in changed)
