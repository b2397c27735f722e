"""``convengine chat``: a conversation in the terminal (interactive or from piped stdin)."""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rich.console import Console
from rich.table import Table
from rich.text import Text

from convengine.audit.turns import last_turn, script_output, turn_steps
from convengine.catalog.errors import ConvEngineError
from convengine.config_loader import import_pack
from convengine.config_loader.companions import choose_llm, default_pack, pack_options
from convengine.config_loader.loader import read_control_rows
from convengine.db import create_sync_engine, parse_database_url, upgrade
from convengine.engine import Engine, TurnResult
from convengine.security.terminal import inert
from convengine.versions.lifecycle import record_import

QUIT = {"/quit", "/exit", "/q"}


def print_result(console: Console, result: TurnResult) -> None:
    console.print(Text.assemble(("bot>", "bold green"), " ", inert(result.text)), soft_wrap=True)
    console.print(Text.assemble("     ", inert(f"{result.intent} / {result.state}  (turn {result.turn})", "dim")),
                  soft_wrap=True)


def print_trace(console: Console, engine: Engine, result: TurnResult) -> None:
    events = last_turn(engine.audit(result.conversation_id))
    steps = turn_steps(events)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("step")
    table.add_column("ms", justify="right")
    table.add_column("stages")
    for step in steps:
        stages = ", ".join(s["stage"] for s in step["stages"])
        ms = f"{step['durationMs']:.2f}" if step["durationMs"] is not None else "-"
        table.add_row(inert(step["step"]), ms, inert(stages))
    console.print(table)
    for output in script_output(events):
        where = f"{output['flow']}/{output['node']}"
        for line in output["stdout"].splitlines():
            console.print(Text.assemble(("print ", "bold cyan"), inert(where, "dim"), " ", inert(line)), soft_wrap=True)
        if output["error"]:
            console.print(Text.assemble(("error ", "bold red"), inert(where, "dim"), " ", inert(output["error"])),
                          soft_wrap=True)


CHAT_HELP = """Commands:
  /help          this help
  /trace         show or hide each turn's step trace
  /reset         start the conversation over (keeps the conversation id)
  /quit          leave (also /exit, /q, Ctrl-D)
Anything else is sent to the engine. Up/down arrows recall earlier messages."""


def enable_line_editing() -> None:
    """Line editing and history for interactive input (readline), kept in ~/.convengine_history."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input still works
        return
    history = Path.home() / ".convengine_history"
    try:
        readline.read_history_file(history)
    except OSError:
        pass
    readline.set_history_length(1000)
    atexit.register(_save_history, readline, history)


def _save_history(readline: ModuleType, history: Path) -> None:
    try:
        readline.write_history_file(history)
    except OSError:
        pass


@dataclass
class ChatSession:
    engine: Engine
    console: Console
    conversation_id: str | None
    trace: bool
    failed: bool = False
    draft: bool = False
    """[versions hook] every turn runs on the draft configuration (``chat --draft``)."""

    def command(self, text: str) -> bool:
        """Run a /command; False when ``text`` is not one."""
        name = text.strip().lower()
        if name in ("/help", "/?"):
            self.console.print(inert(CHAT_HELP))
        elif name == "/trace":
            self.trace = not self.trace
            self.console.print(f"[dim]trace {'on' if self.trace else 'off'}[/dim]")
        elif name == "/reset":
            self.send("", reset=True)
        else:
            return False
        return True

    def send(self, message: str, *, reset: bool = False) -> None:
        try:
            result = self.engine.process(message, self.conversation_id, reset=reset, draft=self.draft)
        except ConvEngineError as exc:
            self.failed = True
            self.console.print(Text.assemble(("error", "red"), " ", inert(f"[{exc.code.value}] {exc.message}")),
                               soft_wrap=True)
            return
        self.conversation_id = result.conversation_id
        print_result(self.console, result)
        if self.trace:
            print_trace(self.console, self.engine, result)


def run_chat(engine: Engine, *, conversation_id: str | None, trace: bool, console: Console,
             draft: bool = False) -> int:
    """Read messages until EOF or /quit; returns the exit code (1 if any turn failed)."""
    interactive = sys.stdin.isatty()
    session = ChatSession(engine, console, conversation_id, trace, draft=draft)
    if interactive:
        enable_line_editing()
        console.print("[dim]Type a message; /help for commands, /quit to leave.[/dim]")
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
            console.print(Text.assemble(("you>", "bold cyan"), " ", inert(message)), soft_wrap=True)
        if message.startswith("/") and session.command(message):
            continue
        session.send(message)
    if session.conversation_id:
        console.print(inert(f"conversation {session.conversation_id}", "dim"))
    return 1 if session.failed else 0


def open_chat_engine(url: str, pack: Path | None, tasks: Path | None, scripted: Path | None, llm: str = "auto",
                     *, replace: bool = False) -> Engine:
    """An engine on ``url`` with its configuration as the user asked for it.

    A database that already holds configuration is used as it is: without ``pack`` nothing is
    imported, and a ``pack`` that differs from what is stored is refused unless ``replace``.
    An empty database gets ``pack``, or the bundled support desk.
    """
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
    engine = create_sync_engine(parse_database_url(url))
    try:
        upgrade(engine)
        if pack is None and any(read_control_rows(engine).values()):
            return None
        chosen = pack or default_pack()
        import_pack(engine, chosen, replace=replace, on_change=record_import)
        return chosen
    finally:
        engine.dispose()
