"""Undo, redo and turns of one conversation raced against each other (Python API and HTTP).

After any interleaving: the conversation's checkpoints form one line (no fork, no lost head), every
caller was told exactly what the audit recorded, in an order that replays (a turn counts up from the
state it ran on, an undo goes back one, a redo forward one, a turn drops what could be redone), and
the state and the history are what that replay ends with. An undo racing a turn applies wholly
before or wholly after it.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
import sqlalchemy as sa

from convengine.catalog.errors import UndoError
from convengine.db import create_sync_engine, parse_database_url
from convengine.engine import Engine
from tests.memory.http_support import MESSAGE, as_, served

pytestmark = pytest.mark.asyncio
ECHO = {
    "settings": {"checkpoint_prune_every": 0, "conversation_memory": {"undo_depth": 50}},
    "ce_intent": [{"intent_code": "ECHO", "description": "echo"}],
    "ce_intent_classifier": [{"intent_code": "ECHO", "rule_type": "REGEX", "pattern": ".*", "priority": 1}],
    "ce_response": [{"response_id": 1, "intent_code": "ECHO", "state_code": "UNKNOWN", "response_type": "EXACT",
                     "exact_text": "You said: {{user_input}}"}],
}
REFUSALS = {"NOTHING_TO_UNDO", "NOTHING_TO_REDO"}


def plan(seed: int, count: int = 24) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(["turn", "turn", "undo", "undo", "redo"]) for _ in range(count)]


def checkpoint_chain(url: str, cid: str) -> list[tuple[str, str | None]]:
    engine = create_sync_engine(parse_database_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
                                        "WHERE thread_id = :t AND checkpoint_ns = '' ORDER BY checkpoint_id"),
                                {"t": cid}).all()
    finally:
        engine.dispose()
    return [(str(r[0]), None if r[1] is None else str(r[1])) for r in rows]


def assert_linear(chain: list[tuple[str, str | None]]) -> None:
    assert chain and chain[0][1] is None
    for (previous, _), (_, parent) in itertools.pairwise(chain):
        assert parent == previous, f"checkpoint chain forks or skips: {chain}"


def replay(events: list[Any]) -> tuple[list[tuple[str, int, str | None]], list[str], int]:
    """What the audit says happened, in order, checked against the rules; the messages in effect and the turn."""
    done: list[tuple[str, int, str | None]] = []
    stack: list[tuple[int, str]] = []
    forward: list[tuple[int, str]] = []
    text: str | None = None
    for event in events:
        if event.stage == "USER_INPUT":
            text = event.payload["text"]
        elif event.stage == "ENGINE_RETURN":
            assert text is not None
            stack.append(((stack[-1][0] if stack else 0) + 1, text))
            forward.clear()
            done.append(("turn", stack[-1][0], text))
        elif event.stage == "UNDO":
            forward.append(stack.pop())
            assert event.payload["turn"] == stack[-1][0]
            done.append(("undo", stack[-1][0], None))
        elif event.stage == "REDO":
            stack.append(forward.pop())
            assert event.payload["turn"] == stack[-1][0]
            done.append(("redo", stack[-1][0], None))
    return done, [m for _, m in stack], stack[-1][0]


def told(outcomes: list[Any]) -> list[tuple[str, int, str | None]]:
    return sorted(o for o in outcomes if o is not None)


async def check(engine: Engine, url: str, cid: str, outcomes: list[Any]) -> None:
    assert_linear(checkpoint_chain(url, cid))
    done, messages, turn = replay(await engine.aaudit(cid))
    assert sorted(done) == told(outcomes)
    state = await engine.astate(cid)
    assert state["turn"] == turn
    history = [row["user_input"] for row in await engine.ahistory(cid) if not row["undone"]]
    assert history == messages


@pytest.mark.parametrize("seed", [1, 2])
async def test_racing_undo_redo_and_turns_in_python(db_url: str, seed: int) -> None:
    engine = await Engine.aopen(db_url, pack=ECHO)
    try:
        cid = (await engine.aprocess("m-first")).conversation_id

        async def run(index: int, op: str) -> tuple[str, int, str | None] | None:
            try:
                if op == "turn":
                    result = await engine.aprocess(f"m{index}", cid)
                    assert result.text == f"You said: m{index}"
                    return ("turn", result.turn, f"m{index}")
                moved = await (engine.aundo(cid) if op == "undo" else engine.aredo(cid))
                return (op, moved.turn, None)
            except UndoError as refused:
                assert refused.code.value in REFUSALS, refused
                return None

        outcomes = await asyncio.gather(*(run(i, op) for i, op in enumerate(plan(seed))))
        await check(engine, db_url, cid, [("turn", 1, "m-first"), *outcomes])
    finally:
        await engine.aclose()


async def test_racing_undo_redo_and_turns_over_http(db_url: str) -> None:
    async with served(db_url, ECHO) as client:
        headers = as_("alice")
        cid = (await client.post(MESSAGE, json={"message": "m-first"}, headers=headers)).json()["conversationId"]

        async def run(index: int, op: str) -> tuple[str, int, str | None] | None:
            if op == "turn":
                reply = await client.post(MESSAGE, json={"message": f"m{index}", "conversationId": cid},
                                          headers=headers)
                body = reply.json()
                assert reply.status_code == 200 and body["success"], body
                assert body["payload"]["value"] == f"You said: m{index}"
                return ("turn", body["turn"], f"m{index}") if "turn" in body else ("turn", -1, f"m{index}")
            answer = await client.post(f"/api/v1/conversation/{cid}/{op}", headers=headers)
            body = answer.json()
            if answer.status_code != 200:
                assert body["errorCode"] in REFUSALS, body
                return None
            return (op, body["turn"], None)

        outcomes = await asyncio.gather(*(run(i, op) for i, op in enumerate(plan(3))))
    engine = await Engine.aopen(db_url)
    try:
        done, _, _ = replay(await engine.aaudit(cid))
        numbered = {m: n for kind, n, m in done if kind == "turn"}  # the message API does not return the turn
        outcomes = [(k, numbered[m], m) if k == "turn" and n == -1 else (k, n, m)
                    for k, n, m in (o for o in outcomes if o is not None)]
        await check(engine, db_url, cid, [("turn", 1, "m-first"), *outcomes])
    finally:
        await engine.aclose()
