"""LLM spend: token usage recorded per call site, priced from ``llm.spend.prices``, summed per
calendar month (UTC) against ``llm.spend.monthly_cap``. At the cap the optional LLM calls (the
intent matcher, knowledge synthesis, entity nodes' LLM extraction) are skipped and the skip is
audited; deterministic paths (classifiers, flows, exact responses) go on."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from convengine.catalog import stages
from convengine.db import turn_connection
from convengine.db.models import CeLlmUsage
from convengine.llm.session import LlmSession
from convengine.settings import LlmSpendSettings

USAGE = CeLlmUsage.__table__
SPEND_CAP_REACHED = stages.LLM_SPEND_CAP_REACHED


class SpendStore(Protocol):
    """Where usage is written and summed (the engine's ConversationStore)."""

    @property
    def engine(self) -> AsyncEngine: ...

    async def run(self, write: Callable[[sa.Connection], None]) -> None: ...


def price(settings: LlmSpendSettings, model: str | None, usage: dict[str, int]) -> float:
    rate = settings.prices.get(model or "") or settings.prices.get("default")
    if rate is None:
        return 0.0
    return (usage.get("input_tokens", 0) * rate.input_per_million
            + usage.get("output_tokens", 0) * rate.output_per_million) / 1_000_000


async def record(store: SpendStore | None, turn: LlmSession, call_site: str, model: str | None, usage: dict[str, int]) -> None:
    """Store one call's usage (best effort: a failed write is audited, never breaks the turn)."""
    if store is None or not usage:
        return
    row = {"conversation_id": turn.conversation_id, "call_site": call_site, "model": model,
           "input_tokens": int(usage.get("input_tokens", 0)), "output_tokens": int(usage.get("output_tokens", 0)),
           "cost": price(turn.settings.llm.spend, model, usage), "created_at": datetime.now(UTC)}

    def write(conn: sa.Connection) -> None:
        conn.execute(sa.insert(USAGE), [row])

    try:
        await store.run(write)
    except Exception:  # noqa: BLE001 - accounting never breaks a turn
        turn.audit(stages.LLM_USAGE_WRITE_FAILED, {"callSite": call_site})


def month_start(now: datetime | None = None) -> datetime:
    now = now or datetime.now(UTC)
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def month_spend(store: SpendStore) -> float:
    query = sa.select(sa.func.coalesce(sa.func.sum(USAGE.c.cost), 0.0)).where(USAGE.c.created_at >= month_start())
    async with turn_connection.reading(store.engine) as conn:  # a turn reads on its own connection
        return float((await conn.execute(query)).scalar_one())


async def capped(turn: LlmSession, call_site: str) -> bool:
    """Whether this month's spend has reached the cap; if so the skip of ``call_site`` is audited."""
    cap = turn.settings.llm.spend.monthly_cap
    store = turn.ctx.services.store
    if cap is None or store is None:
        return False
    spent = await month_spend(store)
    if spent < cap:
        return False
    turn.audit(SPEND_CAP_REACHED, {"callSite": call_site, "spent": round(spent, 6), "cap": cap,
                                   "month": month_start().strftime("%Y-%m"), "skipped": True})
    return True
