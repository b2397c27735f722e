"""``convengine chains``: run due chain work without a long-lived server, list runs, resume one."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.cli.guard import guarded
from convengine.security.terminal import inert

chains_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Chain runs: run due schedules (cron), list runs, resume a run waiting for a person.")
out = Console()

UrlOption = Annotated[str, typer.Option("--url", help="Database URL (sqlite:///FILE or postgresql://...)",
                                        envvar="CONVENGINE_DATABASE_URL")]


def _open(url: str) -> Any:
    from convengine.chains import Chains
    from convengine.engine import Engine

    engine = Engine.open(url)
    return engine, Chains(engine)


@chains_app.command("run-due")
@guarded
def run_due(url: UrlOption = DEFAULT_DATABASE_URL) -> None:
    """Resume every chain run whose schedule step is due (each exactly once, whichever process runs it):
    for deployments without a long-lived server, e.g. from cron every minute."""
    engine, chains = _open(url)
    try:
        runs = chains.run_due()
    finally:
        engine.close()
    for run in runs:
        out.print(inert(f"{run.run_id} {run.chain}: {run.status}"))
    out.print(inert(f"{len(runs)} due run{'s' if len(runs) != 1 else ''} resumed"))


@chains_app.command("list")
@guarded
def list_runs(url: UrlOption = DEFAULT_DATABASE_URL,
              status: Annotated[str | None, typer.Option("--status", help="Only runs with this status")] = None,
              limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50) -> None:
    """Chain runs, newest first."""
    engine, chains = _open(url)
    try:
        runs = chains.runs(status=status, limit=limit)
    finally:
        engine.close()
    table = Table("run", "chain", "status", "step", "created")
    for run in runs:
        table.add_row(*(inert(str(v or "")) for v in (run.run_id, run.chain, run.status, run.current_step,
                                                       run.created_at)))
    out.print(table)


@chains_app.command("resume")
@guarded
def resume(run_id: str, answer: Annotated[str, typer.Argument(help="The answer as JSON, e.g. '{\"approved\": true}'")],
           url: UrlOption = DEFAULT_DATABASE_URL) -> None:
    """Resume a chain run waiting at a human step with a person's answer."""
    value = json.loads(answer)
    engine, chains = _open(url)
    try:
        run = chains.resume(run_id, value)
    finally:
        engine.close()
    out.print(inert(f"{run.run_id} {run.chain}: {run.status}"))
