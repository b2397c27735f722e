"""Helpers for scenario tests: open engines on the test database, read a turn's audit stages."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from convengine.audit import AuditEvent
from convengine.audit.turns import split_turns
from convengine.catalog import stages as audit_stages
from convengine.engine import Engine

STEP_STAGES = {audit_stages.STEP_ENTER, audit_stages.STEP_EXIT, audit_stages.STEP_SKIPPED}

BASE_PACK: dict[str, Any] = {
    # Scenario packs show absent values on purpose (ConvEngine's permissive EXACT rendering);
    # strict rendering, the default, is tested in tests/config_loader/test_template_checks.py.
    "settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}, "template_strict": False},
    "ce_intent": [{"intent_code": "GREETING", "description": "hello"},
                  {"intent_code": "LOAN", "description": "loans"}],
    "ce_intent_classifier": [
        {"intent_code": "GREETING", "state_code": "IDLE", "rule_type": "REGEX", "pattern": r"^\s*(hi|hello)\b",
         "priority": 1},
        {"intent_code": "LOAN", "state_code": "START", "rule_type": "CONTAINS", "pattern": "loan", "priority": 2},
    ],
    "ce_rule": [],
    "ce_response": [
        {"intent_code": "GREETING", "state_code": "IDLE", "exact_text": "Hello there"},
        {"intent_code": "LOAN", "state_code": "START", "exact_text": "Loan started"},
        {"intent_code": "UNKNOWN", "state_code": "UNKNOWN", "exact_text": "Sorry?"},
        {"state_code": "ANY", "exact_text": "Fallback in {{state}}", "priority": 500},
    ],
}


def pack(**tables: Any) -> dict[str, Any]:
    """BASE_PACK with tables added to (lists extend, settings merge)."""
    out = copy.deepcopy(BASE_PACK)
    for table, rows in tables.items():
        if table == "settings":
            _merge(out["settings"], rows)
        else:
            out.setdefault(table, []).extend(copy.deepcopy(rows))
    return out


def _merge(base: dict[str, Any], top: dict[str, Any]) -> None:
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


@asynccontextmanager
async def engine_on(db_url: str, pack_data: Any, **options: Any) -> AsyncIterator[Engine]:
    """An engine serving ``pack_data``, whatever configuration the test's database held before (the
    tests that reopen one database with another pack mean to replace it: ``replace=True``)."""
    engine = await Engine.aopen(db_url, pack=pack_data, **{"replace": True, **options})
    try:
        yield engine
    finally:
        await engine.aclose()


def stages(events: Sequence[AuditEvent], *, with_steps: bool = False) -> list[str]:
    return [e.stage for e in events if with_steps or e.stage not in STEP_STAGES]


async def turn_stages(engine: Engine, conversation_id: str, index: int = -1, *, with_steps: bool = False) -> list[str]:
    return stages(split_turns(await engine.aaudit(conversation_id))[index], with_steps=with_steps)


async def turn_events(engine: Engine, conversation_id: str, index: int = -1) -> list[AuditEvent]:
    return split_turns(await engine.aaudit(conversation_id))[index]


def assert_in_order(actual: Sequence[str], expected: Sequence[str]) -> None:
    """``expected`` appears in ``actual`` as a subsequence (other stages may sit between)."""
    position = 0
    for stage in expected:
        try:
            position = actual.index(stage, position) + 1
        except ValueError:
            raise AssertionError(f"stage {stage!r} missing (or out of order) in {list(actual)}") from None


def payload_of(events: Sequence[AuditEvent], stage: str) -> dict[str, Any]:
    found = [e.payload for e in events if e.stage == stage]
    assert found, f"no {stage} in {[e.stage for e in events]}"
    return found[-1]


async def checkpoint_chain(engine: Engine, cid: str) -> list[Any]:
    saver = engine._runtime.saver
    return [c async for c in saver.alist({"configurable": {"thread_id": cid}})]


def assert_linear(checkpoints: list[Any]) -> None:
    ids = {c.config["configurable"]["checkpoint_id"] for c in checkpoints}
    parents = [c.parent_config["configurable"]["checkpoint_id"] for c in checkpoints if c.parent_config]
    assert len(parents) == len(set(parents)), "two checkpoints share a parent: history forked"
    assert set(parents) <= ids
    assert len(checkpoints) - len(parents) == 1, "exactly one root"
