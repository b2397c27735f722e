"""A turn commits once: its checkpoint, ``ce_conversation`` row, history row, audit batch and memory rows
in one transaction. A turn that fails at any point, even after everything was written and just before
the commit, leaves the conversation exactly as the previous turn left it, and its failure is audited
once, with the events it emitted, in its own turn (both backends)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.audit.turns import split_turns
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError, ConversationNotFoundError, ErrorCode
from convengine.checkpointing.persistence import ConversationStore
from convengine.engine import Engine
from convengine.nodes.common import Step
from tests.helpers import checkpoint_chain, engine_on, pack

pytestmark = pytest.mark.asyncio

KNOWN, UNKNOWN = "ENGINE_KNOWN_FAILURE", "ENGINE_UNKNOWN_FAILURE"
LOST = "the server went away before the commit"


class CommitFault:
    """While armed, a turn's commit writes everything in its transaction, looks at what it wrote, then fails."""

    def __init__(self) -> None:
        self.armed = False
        self.seen: list[dict[str, int]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = ConversationStore.commit_turn
        fault = self

        async def commit_turn(store: ConversationStore, conn: Any, *, conversation_id: str, extra: Any = None,
                              **rows: Any) -> None:
            if not fault.armed:
                await original(store, conn, conversation_id=conversation_id, extra=extra, **rows)
                return

            def then_fail(c: sa.Connection) -> None:
                if extra.after is not None:
                    extra.after(c)
                fault.seen.append(counts(c, conversation_id))
                raise RuntimeError(LOST)

            assert extra is not None  # a completed turn always writes its memory rows with it
            await original(store, conn, conversation_id=conversation_id, extra=extra.followed_by(then_fail), **rows)

        monkeypatch.setattr(ConversationStore, "commit_turn", commit_turn)


def counts(conn: sa.Connection, cid: str) -> dict[str, int]:
    """What the conversation has in each table, as ``conn`` sees it."""
    found = {}
    for table, column in (("checkpoints", "thread_id"), ("ce_conversation_history", "conversation_id"),
                          ("ce_conversation", "conversation_id"), ("ce_audit", "conversation_id"),
                          ("ce_audit_turn", "conversation_id")):
        found[table] = int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table} WHERE {column} = :c"),
                                        {"c": cid}).scalar_one())
    # a turn's audit is one packed ce_audit_turn row; ce_audit keeps rows written before that format
    found["ce_audit"] += found.pop("ce_audit_turn")
    return found


async def stored_counts(engine: Engine, cid: str) -> dict[str, int]:
    return await asyncio.to_thread(_counts_on, engine.runtime.sync_engine, cid)


def _counts_on(sync_engine: sa.Engine, cid: str) -> dict[str, int]:
    with sync_engine.connect() as conn:
        return counts(conn, cid)


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Iterator[CommitFault]:
    made = CommitFault()
    made.install(monkeypatch)
    yield made


async def test_a_turn_failing_just_before_its_commit_leaves_nothing_of_itself_but_its_audit(
        db_url: str, fault: CommitFault) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello", input_params={"kept": 1})).conversation_id
        before = await stored_counts(engine, cid)
        state_before = await engine.astate(cid)
        row_before = await engine.runtime.store.projection(cid)
        fault.armed = True
        with pytest.raises(ConvEngineError) as failed:
            await engine.aprocess("a loan please", cid, input_params={"other": 2})
        # everything had been written in the turn's transaction...
        assert fault.seen == [{**before, "checkpoints": before["checkpoints"] + 1,
                               "ce_conversation_history": before["ce_conversation_history"] + 1,
                               "ce_audit": fault.seen[0]["ce_audit"]}]
        assert fault.seen[0]["ce_audit"] > before["ce_audit"]
        # ...and none of it was committed
        after = await stored_counts(engine, cid)
        assert {k: v for k, v in after.items() if k != "ce_audit"} == {k: v for k, v in before.items() if k != "ce_audit"}
        assert await engine.astate(cid) == state_before
        row_after = await engine.runtime.store.projection(cid)
        assert row_after is not None and row_before is not None
        assert (row_before["lifecycle"], row_after["lifecycle"]) == ("IN_PROGRESS", "INTERRUPTED")
        unchanged = set(row_before) - {"lifecycle", "updated_at"}
        assert {k: row_after[k] for k in unchanged} == {k: row_before[k] for k in unchanged}
        assert [h["user_input"] for h in await engine.ahistory(cid)] == ["hello"]
        assert await engine.alifecycle(cid) == "INTERRUPTED"
        error = failed.value
        assert error.code == ErrorCode.INTERNAL_ERROR and LOST in error.message
        assert error.details["conversationId"] == cid
        fault.armed = False
        again = await engine.aprocess("a loan please", cid)
        assert (again.turn, again.intent, again.state) == (2, "LOAN", "START")


async def test_the_failed_turns_audit_is_stored_once_in_its_own_turn(db_url: str, fault: CommitFault) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        fault.armed = True
        with pytest.raises(ConvEngineError):
            await engine.aprocess("a loan please", cid)
        fault.armed = False
        await engine.aprocess("hello", cid)
        turns = split_turns(await engine.aaudit(cid))
        assert len(turns) == 3
        failed = [e.stage for e in turns[1]]
        # the events of the rolled-back batch are written again with the failure, not twice
        assert failed.count(stages.USER_INPUT) == 1 and failed.count(stages.ASSISTANT_OUTPUT) == 1
        assert failed[-1] == UNKNOWN and failed.count(UNKNOWN) == 1
        turn_ids = {e.turn_id for e in turns[1]}
        assert len(turn_ids) == 1 and None not in turn_ids  # the stored failure carries its turn's id too
        payload = turns[1][-1].payload
        assert payload["errorCode"] == "INTERNAL_ERROR" and LOST in payload["message"]
        assert [e.stage for e in turns[1]][:-1] == [e.stage for e in turns[1][:-1]]  # order kept
        assert UNKNOWN not in [e.stage for e in turns[2]]


async def test_a_first_turn_failing_at_its_commit_leaves_no_state_and_the_next_is_turn_one(
        db_url: str, fault: CommitFault) -> None:
    async with engine_on(db_url, pack()) as engine:
        cid = str(uuid.uuid4())
        fault.armed = True
        with pytest.raises(ConvEngineError):
            await engine.aprocess("hello", cid, user_id="ana")
        assert fault.seen[0]["checkpoints"] == 1 and fault.seen[0]["ce_conversation_history"] == 1
        counted = await stored_counts(engine, cid)
        assert (counted["checkpoints"], counted["ce_conversation_history"]) == (0, 0)
        assert counted["ce_conversation"] == 1  # the failure's audit needs the row; it has no turn in it
        with pytest.raises(ConversationNotFoundError):
            await engine.astate(cid)
        assert [e.stage for e in await engine.aaudit(cid)][-1] == UNKNOWN
        fault.armed = False
        first = await engine.aprocess("hello", cid, user_id="ana")
        assert (first.turn, first.intent) == (1, "GREETING")
        assert len(await checkpoint_chain(engine, cid)) == 1


async def test_a_known_failure_keeps_its_code_and_is_audited_as_known(db_url: str) -> None:
    from convengine.catalog.errors import InvalidInputError

    def refuse(turn: Any) -> None:
        raise InvalidInputError("the order number is not one of yours")

    async with engine_on(db_url, pack(), steps=[Step("check", refuse, after="rules")]) as engine:
        cid = str(uuid.uuid4())
        with pytest.raises(InvalidInputError, match="not one of yours") as refused:
            await engine.aprocess("a loan please", cid)
        assert refused.value.details["conversationId"] == cid
        failure = (await engine.aaudit(cid))[-1]
        assert failure.stage == KNOWN
        assert failure.payload["errorCode"] == refused.value.code.value


async def test_a_cancelled_turn_leaves_the_conversation_as_it_was_and_frees_it(db_url: str) -> None:
    entered = asyncio.Event()

    async def stall(turn: Any) -> None:
        if turn.user_text == "stall":
            entered.set()
            await asyncio.sleep(60)

    async with engine_on(db_url, pack(), steps=[Step("stall", stall, after="rules")],
                         turn_lock_timeout_s=5) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        before = await stored_counts(engine, cid)
        task = asyncio.create_task(engine.aprocess("stall", cid))
        await asyncio.wait_for(entered.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await stored_counts(engine, cid)
        assert (after["checkpoints"], after["ce_conversation_history"]) == (before["checkpoints"],
                                                                           before["ce_conversation_history"])
        assert (await engine.astate(cid))["turn"] == 1
        # its lock and admission slot were given back: the next turn neither waits nor is refused
        next_turn = await asyncio.wait_for(engine.aprocess("a loan please", cid), 4)
        assert next_turn.turn == 2
        assert engine.runtime.locks.held() == 0 and engine.runtime.gate.running == 0
