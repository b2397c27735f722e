"""``convengine pack replay``: recorded conversations replayed against a draft or a version, with
where each turn differs; exit 1 when anything differs, 3 when only some could not be replayed."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.text import Text

from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.catalog.errors import ConvEngineError
from convengine.cli.guard import fail, terminal
from convengine.cli.versions import UrlOption
from convengine.security.terminal import inert

if TYPE_CHECKING:
    from convengine.engine.replay_models import ReplayReport

out = terminal()
DIFFERS, NOT_REPLAYABLE = 1, 3
"""Exit codes: something differs (whatever else); only conversations that could not be replayed."""


def replay(
    url: UrlOption = DEFAULT_DATABASE_URL,
    draft: Annotated[int | None, typer.Option("--draft", help="The draft to replay against (its version "
                                                              "number; default: the draft)")] = None,
    version: Annotated[int | None, typer.Option("--version", help="Replay against this version instead")] = None,
    last: Annotated[int, typer.Option("--last", min=1, max=1000, help="The latest N conversations")] = 50,
    intent: Annotated[str | None, typer.Option("--intent", help="Only conversations with this intent")] = None,
    feedback: Annotated[Literal["up", "down"] | None, typer.Option(
        "--feedback", help="Only conversations with a thumbs up or down")] = None,
    since: Annotated[datetime | None, typer.Option("--since", help="Last activity at or after (ISO time)")] = None,
    until: Annotated[datetime | None, typer.Option("--until", help="Last activity before (ISO time)")] = None,
    ran_on: Annotated[int | None, typer.Option("--ran-on", help="Only conversations pinned to this version")] = None,
    live_llm: Annotated[str | None, typer.Option(
        "--live-llm", help="Call this model (e.g. openai) for LLM calls the recording cannot answer")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON")] = False,
) -> None:
    """Replay recorded conversations against a draft or a version: no tool or model is called (unless
    --live-llm); prints each turn that differs. Exit 1 when anything differs, 3 when some could not be
    replayed (and nothing differs), 0 otherwise."""
    from convengine.engine import Engine

    try:
        with Engine.open(url, **({"llm": live_llm} if live_llm else {})) as engine:
            report = engine.replay(draft=draft if draft is not None else True, version=version,
                                   live_llm=live_llm is not None, last=last, intent=intent, feedback=feedback,
                                   since=since, until=until, ran_on=ran_on)
    except ConvEngineError as exc:
        fail(exc)
    if as_json:
        out.print(inert(json.dumps(report.to_dict(), ensure_ascii=False, indent=2)), soft_wrap=True)
    else:
        _print(report)
    if report.changed:
        raise typer.Exit(DIFFERS)
    if report.not_replayable:
        raise typer.Exit(NOT_REPLAYABLE)


def _print(report: ReplayReport) -> None:
    what = f"draft {report.version}" if report.draft else f"version {report.version}"
    out.print(inert(f"replayed {len(report.replayed)} conversations against {what}: {len(report.changed)} changed, "
                    f"{len(report.not_replayable)} not replayable"), soft_wrap=True)
    for conversation in report.changed:
        out.print(Text.assemble(("changed ", "yellow"), inert(conversation.conversation_id)), soft_wrap=True)
        for turn in conversation.diffs:
            out.print(inert(f"  turn {turn.turn} ({turn.user!r}):"), soft_wrap=True)
            for d in turn.differences:
                out.print(inert(f"    {d.aspect}: {_short(d.recorded)} -> {_short(d.replayed)}"), soft_wrap=True)
    for missing in report.not_replayable:
        out.print(Text.assemble(("not replayable ", "red"), inert(f"{missing.conversation_id}: {missing.reason}")),
                  soft_wrap=True)


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return repr(text[:200] + ("..." if len(text) > 200 else ""))
