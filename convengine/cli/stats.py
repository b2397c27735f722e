"""``convengine stats``: the analytics numbers (``Engine.stats``) as a table or as JSON."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from convengine.catalog.defaults import DEFAULT_DATABASE_URL, DEFAULT_IDLE_AFTER_S
from convengine.cli.guard import guarded, terminal
from convengine.security.terminal import inert

if TYPE_CHECKING:
    from convengine.analytics import Stats, StatsRow

out = terminal()
PIPED_WIDTH = 240
COLUMNS = (("conv.", "conversations"), ("turns", "turns"), ("drop-off", "dropped_off"), ("handoffs", "handoffs"),
           ("contained", "contained"), ("fallback", "fallback_rate"), ("UNKNOWN", "unknown_rate"),
           ("up", "feedback_up"), ("down", "feedback_down"), ("LLM calls", "llm_calls"),
           ("tokens in", "input_tokens"), ("tokens out", "output_tokens"), ("est. cost", "estimated_cost"))


def _instant(value: str | None, option: str) -> datetime | None:
    """An ISO 8601 date or time; without a zone it is UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(f"{value[:60]!r} is not an ISO 8601 date or time (e.g. 2025-01-31 or "
                                 "2025-01-31T09:30:00+02:00)", param_hint=option) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _cell(row: StatsRow, field: str) -> str:
    value = getattr(row, field)
    if field == "contained":
        rate = row.containment_rate
        return f"{value} ({rate:.0%})" if rate is not None else str(value)
    if field.endswith("_rate"):
        return "-" if value is None else f"{value:.1%}"
    if field == "estimated_cost":
        return f"{value:.4f}"
    return str(value)


def table(found: Stats) -> Table:
    """The rows (one per group) and the total, as a rich table."""
    by = list(found.query.by)
    shown = Table(title="convengine stats (cost is an estimate)", title_justify="left")
    for name in [*by, *(label for label, _ in COLUMNS)]:
        shown.add_column(name, justify="left" if name in by else "right", no_wrap=name not in by)
    for row in found.rows:
        keys = [inert("-" if getattr(row, d) is None else getattr(row, d)) for d in by]
        shown.add_row(*keys, *(_cell(row, f) for _, f in COLUMNS))
    total: list[Text | str] = [inert("total", style="bold"), *([""] * (len(by) - 1))] if by else []
    shown.add_row(*total, *(_cell(found.total, f) for _, f in COLUMNS), end_section=True)
    return shown


@guarded
def stats(
    url: Annotated[str, typer.Option("--url", help="Database URL (sqlite:///FILE or postgresql://...)",
                                     envvar="CONVENGINE_DATABASE_URL")] = DEFAULT_DATABASE_URL,
    since: Annotated[str | None, typer.Option("--since", help="Turns at or after this date or time "
                                                             "(ISO 8601; UTC unless it names a zone)")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Turns before this date or time")] = None,
    by: Annotated[str, typer.Option("--by", help="Group by intent, state and/or day, comma-separated "
                                                 "(e.g. intent,day); empty: the total only")] = "intent",
    intent: Annotated[str | None, typer.Option("--intent", help="Only this intent")] = None,
    version: Annotated[int | None, typer.Option("--version", min=1, help="Only conversations on this "
                                                                         "configuration version")] = None,
    idle_after: Annotated[float, typer.Option("--idle-after", min=0.001, help="Seconds without a turn after "
                                              "which a conversation that did not end dropped off")] = DEFAULT_IDLE_AFTER_S,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (the HTTP API's shape) instead of a table")] = False,
) -> None:
    """Conversations, turns, drop-off, fallback and UNKNOWN rates, handoffs, containment, feedback, LLM
    calls, tokens and estimated cost, per intent, state and/or day (see docs/console.md#analytics)."""
    window = {"since": _instant(since, "--since"), "until": _instant(until, "--until")}
    found = asyncio.run(_stats(url, by=by, intent=intent, version=version, idle_after_s=idle_after, **window))
    if as_json:
        out.print_json(found.model_dump_json(by_alias=True))
        return
    shown = table(found)
    if not out.is_terminal:  # piped: as wide as the table needs, not rich's default 80 columns
        out.width = max(out.width, PIPED_WIDTH)
    out.print(shown)


async def _stats(url: str, **query: object) -> Stats:
    from convengine.engine import Engine

    engine = await Engine.aopen(url)
    try:
        return await engine.astats(**query)  # type: ignore[arg-type]
    finally:
        await engine.aclose()
