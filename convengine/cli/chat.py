"""``convengine chat``: a conversation in the terminal (interactive or from piped stdin)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from convengine.engine import Engine, TurnResult
from convengine.errors import ConvEngineError

QUIT = {"/quit", "/exit", "/q"}


def print_result(console: Console, result: TurnResult) -> None:
    console.print(f"[bold green]bot>[/bold green] {result.text}", highlight=False)
    console.print(f"     [dim]{result.intent} / {result.state}  (turn {result.turn})[/dim]", highlight=False)


def print_trace(console: Console, engine: Engine, result: TurnResult) -> None:
    trace = engine.trace(result.conversation_id)
    steps = _last_turn(trace["steps"])
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("step")
    table.add_column("ms", justify="right")
    table.add_column("stages")
    for step in steps:
        stages = ", ".join(s["stage"] for s in step["stages"])
        ms = f"{step['durationMs']:.2f}" if step["durationMs"] is not None else "-"
        table.add_row(step["step"], ms, stages)
    console.print(table)


def _last_turn(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    starts = [i for i, s in enumerate(steps) if s["step"] == "load_or_create_conversation"]
    return steps[starts[-1]:] if starts else steps


def run_chat(engine: Engine, *, conversation_id: str | None, trace: bool, console: Console) -> int:
    """Read messages until EOF or /quit; returns the exit code (1 if any turn failed)."""
    interactive = sys.stdin.isatty()
    failed = False
    if interactive:
        console.print("[dim]Type a message, /quit to leave.[/dim]")
    while True:
        try:
            line = console.input("[bold cyan]you>[/bold cyan] ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not interactive and line == "":
            break
        message = line.rstrip("\n")
        if message.strip() in QUIT:
            break
        if not message.strip():
            continue
        if not interactive:
            console.print(f"[bold cyan]you>[/bold cyan] {message}", highlight=False)
        try:
            result = engine.process(message, conversation_id)
        except ConvEngineError as exc:
            failed = True
            console.print(f"[red]error[/red] [{exc.code.value}] {exc.message}", highlight=False)
            continue
        conversation_id = result.conversation_id
        print_result(console, result)
        if trace:
            print_trace(console, engine, result)
    if conversation_id:
        console.print(f"[dim]conversation {conversation_id}[/dim]")
    return 1 if failed else 0


def open_chat_engine(url: str, pack: Path | None, tasks: Path | None, scripted: Path | None, llm: str = "auto",
                     *, replace: bool = False) -> Engine:
    """An engine on ``url`` with its configuration as the user asked for it.

    A database that already holds configuration is used as it is: without ``pack`` nothing is
    imported, and a ``pack`` that differs from what is stored is refused unless ``replace``.
    An empty database gets ``pack``, or the bundled support desk.
    """
    from convengine.cli.support import choose_llm, default_pack, pack_options

    chosen_pack = prepare_configuration(url, pack, replace=replace)
    options = pack_options(chosen_pack or default_pack(), tasks, scripted)
    options.pop("pack")
    if "llm" not in options:
        chosen = choose_llm(llm)
        if chosen is not None:
            options["llm"] = chosen
    return Engine.open(url, **options)


def prepare_configuration(url: str, pack: Path | None, *, replace: bool) -> Path | None:
    """Migrate, then import ``pack`` (or the bundled pack into an empty database); the pack
    whose companion files (tasks, scripted model) apply, or None to use the stored configuration."""
    from convengine.cli.support import default_pack
    from convengine.config_loader import import_pack
    from convengine.config_loader.loader import read_control_rows
    from convengine.db import create_sync_engine, parse_database_url, upgrade

    engine = create_sync_engine(parse_database_url(url))
    try:
        upgrade(engine)
        if pack is None and any(read_control_rows(engine).values()):
            return None
        chosen = pack or default_pack()
        import_pack(engine, chosen, replace=replace)
        return chosen
    finally:
        engine.dispose()
