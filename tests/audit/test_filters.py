"""Which audit events are kept: ConvEngine's enabled / level / include / exclude / rate-limit controls,
as a unit (:class:`AuditFilter`) and as an engine's stored trail shows them on both backends."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from convengine.audit import AuditFilter
from convengine.audit import filters as filters_module
from convengine.catalog import stages
from convengine.settings import AuditSettings
from tests.helpers import engine_on, pack

CID, OTHER = "c-1", "c-2"


def audit_filter(**settings: Any) -> AuditFilter:
    return AuditFilter(AuditSettings(**settings))


def kept(f: AuditFilter, *names: str, cid: str = CID, intent: str | None = None) -> list[str]:
    return [name for name in names if f.keep(name, cid, intent)]


MIXED = (stages.STEP_ENTER, stages.STEP_EXIT, stages.STEP_ERROR, stages.USER_INPUT, stages.POLICY_BLOCK,
         stages.INPUT_PARAMS_REJECTED, "MCP_TOOL_FAILED", stages.ASSISTANT_OUTPUT)


def test_level_all_keeps_everything_and_disabled_or_none_keeps_nothing() -> None:
    assert kept(audit_filter(), *MIXED) == list(MIXED)
    assert kept(audit_filter(enabled=False), *MIXED) == []
    assert kept(audit_filter(level="NONE"), *MIXED) == []


def test_standard_drops_only_step_enter_and_exit() -> None:
    # STEP_ERROR says why a turn failed: STANDARD keeps it with every other stage.
    assert kept(audit_filter(level="STANDARD"), *MIXED) == [s for s in MIXED if s not in ("STEP_ENTER", "STEP_EXIT")]


def test_error_only_keeps_the_stages_naming_an_error_a_failure_or_a_rejection() -> None:
    assert kept(audit_filter(level="ERROR_ONLY"), *MIXED) == [stages.STEP_ERROR, stages.INPUT_PARAMS_REJECTED,
                                                             "MCP_TOOL_FAILED"]
    assert audit_filter(level="ERROR_ONLY").keep("engine_known_failure", CID, None)  # case does not matter


def test_stage_patterns_are_case_insensitive_globs_and_exclude_wins() -> None:
    f = audit_filter(include_stages=["step_*", "user_input"], exclude_stages=["STEP_EXIT"])
    assert kept(f, *MIXED) == [stages.STEP_ENTER, stages.STEP_ERROR, stages.USER_INPUT]
    assert kept(audit_filter(exclude_stages=["*_OUTPUT", "POLICY_?LOCK"]), *MIXED) == \
        [s for s in MIXED if s not in (stages.ASSISTANT_OUTPUT, stages.POLICY_BLOCK)]


def test_intent_patterns_apply_only_to_events_that_carry_an_intent() -> None:
    f = audit_filter(include_intents=["LOAN*"], exclude_intents=["loan_closed"])
    assert f.keep(stages.USER_INPUT, CID, "LOAN_APPLY")
    assert not f.keep(stages.USER_INPUT, CID, "GREETING")
    assert not f.keep(stages.USER_INPUT, CID, "LOAN_CLOSED")  # excluded although included by LOAN*
    assert f.keep(stages.USER_INPUT, CID, None)  # no intent known yet: the intent filters do not apply
    assert f.keep(stages.USER_INPUT, CID, "")


def rate_limited(**rate: Any) -> AuditFilter:
    return audit_filter(rate_limit={"enabled": True, **rate})


def test_the_rate_limit_counts_per_conversation_and_stage() -> None:
    f = rate_limited(max_events=2, window_ms=60_000)
    assert [f.keep(stages.USER_INPUT, CID, None) for _ in range(3)] == [True, True, False]
    assert f.keep(stages.ASSISTANT_OUTPUT, CID, None)  # another stage: its own bucket
    assert f.keep(stages.USER_INPUT, OTHER, None)  # another conversation: its own bucket
    assert f.bucket_count() == 3


def test_the_rate_limit_can_pool_conversations_and_stages() -> None:
    pooled = rate_limited(max_events=2, window_ms=60_000, per_conversation=False, per_stage=False)
    assert [pooled.keep(stage, cid, None) for stage, cid in
            ((stages.USER_INPUT, CID), (stages.ASSISTANT_OUTPUT, OTHER), (stages.POLICY_BLOCK, "c-3"))] == \
        [True, True, False]
    assert pooled.bucket_count() == 1


def test_a_new_window_starts_a_new_count(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(filters_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    f = rate_limited(max_events=1, window_ms=500)
    assert [f.keep(stages.USER_INPUT, CID, None) for _ in range(2)] == [True, False]
    now[0] += 0.499
    assert not f.keep(stages.USER_INPUT, CID, None)  # still the same window
    now[0] += 0.001
    assert f.keep(stages.USER_INPUT, CID, None)  # 500 ms after the window started
    assert not f.keep(stages.USER_INPUT, CID, None)


def test_the_oldest_buckets_are_forgotten_past_the_tracked_limit() -> None:
    f = rate_limited(max_events=1, window_ms=60_000, max_tracked_buckets=2)
    assert f.keep(stages.USER_INPUT, "a", None) and f.keep(stages.USER_INPUT, "b", None)
    assert not f.keep(stages.USER_INPUT, "a", None)  # a is now the most recently used
    assert f.keep(stages.USER_INPUT, "c", None)  # evicts b, the least recently used
    assert f.bucket_count() == 2
    assert not f.keep(stages.USER_INPUT, "a", None)  # a's count was kept
    assert f.keep(stages.USER_INPUT, "b", None)  # b starts over: its bucket was dropped


def test_a_pinned_versions_filter_counts_into_the_same_buckets() -> None:
    live = rate_limited(max_events=2, window_ms=60_000)
    pinned = live.sharing_buckets(AuditSettings(rate_limit={"enabled": True, "max_events": 2, "window_ms": 60_000},
                                                exclude_stages=["ASSISTANT_OUTPUT"]))
    assert live.keep(stages.USER_INPUT, CID, None)
    assert pinned.keep(stages.USER_INPUT, CID, None)
    assert not live.keep(stages.USER_INPUT, CID, None)  # the pinned filter's event counted too
    assert not pinned.keep(stages.ASSISTANT_OUTPUT, CID, None)  # its own settings still apply
    assert live.keep(stages.ASSISTANT_OUTPUT, CID, None)


# --- what an engine stores ------------------------------------------------------------------------


async def stored_stages(db_url: str, **audit: Any) -> list[str]:
    async with engine_on(db_url, pack(), audit=audit) as engine:
        result = await engine.aprocess("hello")
        return [e.stage for e in await engine.aaudit(result.conversation_id)]


@pytest.mark.asyncio
async def test_an_engine_stores_what_its_audit_level_keeps(db_url: str) -> None:
    everything = await stored_stages(db_url)
    assert {stages.STEP_ENTER, stages.STEP_EXIT, stages.USER_INPUT, stages.ASSISTANT_OUTPUT} <= set(everything)
    standard = await stored_stages(db_url, level="STANDARD")
    assert standard == [s for s in everything if s not in (stages.STEP_ENTER, stages.STEP_EXIT)]
    only = await stored_stages(db_url, include_stages=["USER_INPUT", "ASSISTANT_OUTPUT"])
    assert only == [stages.USER_INPUT, stages.ASSISTANT_OUTPUT]


@pytest.mark.asyncio
async def test_error_only_stores_a_failed_turn_and_nothing_of_a_good_one(db_url: str) -> None:
    from convengine.catalog.errors import ConvEngineError
    from convengine.nodes.common import Step

    def explode(turn: Any) -> None:
        if turn.user_text == "boom":
            raise RuntimeError("step broke")

    async with engine_on(db_url, pack(), audit={"level": "ERROR_ONLY"},
                         steps=[Step("boom", explode, after="rules")]) as engine:
        cid = (await engine.aprocess("hello")).conversation_id
        assert await engine.aaudit(cid) == []  # a good turn emits no error stage
        with pytest.raises(ConvEngineError):
            await engine.aprocess("boom", cid)
        assert [e.stage for e in await engine.aaudit(cid)] == [stages.STEP_ERROR, "ENGINE_KNOWN_FAILURE"]
