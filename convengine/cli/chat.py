"""``convengine chat``: a conversation in the terminal (interactive or from piped stdin)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from rich.console import Console
from rich.text import Text

from convengine.audit import AuditEvent
from convengine.audit.turns import last_turn, script_output, turn_steps
from convengine.catalog import stages
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


def step_times(events: list[AuditEvent]) -> dict[str, list[float]]:
    """Each step's durations in the order its runs ended, to the microsecond (the trace's ``durationMs``
    is ConvEngine's whole milliseconds)."""
    times: dict[str, list[float]] = {}
    for event in events:
        if event.stage in (stages.STEP_EXIT, stages.STEP_ERROR):
            value = event.payload.get("durationMs")
            if isinstance(value, int | float) and not isinstance(value, bool):
                times.setdefault(str(event.payload.get("step")), []).append(float(value))
    return times


def turn_total(events: list[AuditEvent]) -> float | None:
    """The turn's total time (``PIPELINE_TIMING.totalMs``), when it finished."""
    total = next((e.payload.get("totalMs") for e in reversed(events) if e.stage == stages.PIPELINE_TIMING), None)
    return float(total) if isinstance(total, int | float) else None


def print_trace(console: Console, engine: Engine, result: TurnResult) -> None:
    """One line per step: name, time in milliseconds (three decimals), the stages it emitted; then the
    turn's total. Plain lines, never padded or wrapped, so a piped transcript stays greppable."""
    events = last_turn(engine.audit(result.conversation_id))
    steps, times = turn_steps(events), step_times(events)
    width = max((len(str(step["step"])) for step in steps), default=4)
    console.print(Text(f"{'step':<{width}}  {'ms':>8}  stages", style="bold"))
    for step in steps:
        runs = times.get(str(step["step"])) or []
        ms = f"{runs.pop(0):.3f}" if runs else "-"
        line = f"{step['step']:<{width}}  {ms:>8}  {', '.join(s['stage'] for s in step['stages'])}"
        console.print(inert(line.rstrip()))
    total = turn_total(events)
    if total is not None:
        console.print(inert(f"{'turn total':<{width}}  {total:>8.3f}"))
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
  /quit          leave (also /exit, /q, Ctrl-D; Ctrl-C leaves with exit code 130)
A line starting with / is a command; start it with // to send it as a message (one / is dropped).
Anything else is sent to the engine. Up/down arrows recall earlier messages."""

INTERRUPTED = 130
"""Exit code of a chat left with Ctrl-C (128 + SIGINT, as shells report it)."""


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

    def command(self, text: str) -> None:
        """Run a /command; an unknown one is answered here, never sent to the engine."""
        name = text.strip().lower()
        if name in ("/help", "/?"):
            self.console.print(inert(CHAT_HELP))
        elif name == "/trace":
            self.trace = not self.trace
            self.console.print(f"[dim]trace {'on' if self.trace else 'off'}[/dim]")
        elif name == "/reset":
            self.send("", reset=True)
        else:
            self.console.print(Text.assemble(("unknown command", "yellow"), " ", inert(text.strip().split()[0]),
                                             inert("; /help lists the commands, // sends a message starting "
                                                   "with /")))

    def handle(self, message: str) -> None:
        """A line the user typed: a /command, or a message for the engine (``//`` escapes a leading /)."""
        if message.startswith("//"):
            self.send(message[1:])
        elif message.startswith("/"):
            self.command(message)
        else:
            self.send(message)

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
    """Read messages until EOF or /quit; returns the exit code (1 if any turn failed, 130 after Ctrl-C).
    Either way the conversation id is printed last, so the conversation can be continued."""
    interactive = sys.stdin.isatty()
    session = ChatSession(engine, console, conversation_id, trace, draft=draft)
    if interactive:
        enable_line_editing()
        console.print("[dim]Type a message; /help for commands, /quit to leave.[/dim]")
    code = 0
    try:
        converse(session, interactive)
    except KeyboardInterrupt:
        console.print()  # end the line the prompt (or a turn's output) was on
        code = INTERRUPTED
    except EOFError:  # Ctrl-D at the prompt
        console.print()
    if session.conversation_id:
        console.print(inert(f"conversation {session.conversation_id} (continue it with --conversation "
                            f"{session.conversation_id})", "dim"))
    return code or (1 if session.failed else 0)


def converse(session: ChatSession, interactive: bool) -> None:
    """The read-and-answer loop, until EOF or /quit."""
    console = session.console
    while True:
        line = console.input("[bold cyan]you>[/bold cyan] ") if interactive else sys.stdin.readline()
        if not interactive and line == "":
            return
        message = line.rstrip("\n")
        if message.strip() in QUIT:
            return
        if not message.strip():
            continue
        if not interactive:
            console.print(Text.assemble(("you>", "bold cyan"), " ", inert(message)))
        session.handle(message)


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
    with opening_warnings_unlogged():
        return Engine.open(url, **options)


@contextlib.contextmanager
def opening_warnings_unlogged() -> Iterator[None]:
    """The engine logs its configuration warnings as it opens; the CLI prints ``engine.warnings``
    itself (each once, in its own format), so the log records are dropped meanwhile."""
    log = logging.getLogger(Engine.__module__)
    def drop(record: logging.LogRecord) -> bool:
        return False

    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


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
