"""The ``convengine`` command: db, pack, chat, serve and test sub-commands."""

from __future__ import annotations

import sys
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from convengine.catalog.defaults import DEFAULT_DATABASE_URL, LIVE_CHANNEL
from convengine.catalog.errors import ConfigError, ConvEngineError
from convengine.cli.chains import chains_app
from convengine.cli.export import export_test
from convengine.cli.guard import fail, guarded, state, terminal
from convengine.cli.init import init
from convengine.cli.knowledge import knowledge_app
from convengine.cli.replay import replay
from convengine.cli.schema import register as register_schema_command
from convengine.cli.stats import stats as stats_command
from convengine.cli.versions import register as register_version_commands
from convengine.security.terminal import inert

# rich_markup_mode=None: typer's rich help shows flags as "--trace <bool>"; the plain help does not.
app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="convengine: a data-driven conversational engine.")
db_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Database schema of the ce_* tables.")
pack_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                       help="Import, export and validate packs (YAML control-plane rows).")
app.add_typer(db_app, name="db")
app.add_typer(pack_app, name="pack")
app.add_typer(knowledge_app, name="knowledge")
app.add_typer(chains_app, name="chains")
app.command("export-test")(export_test)
app.command("init")(init)
app.command("stats")(stats_command)
register_version_commands(pack_app)  # pack versions|draft|diff|publish|rollback|channel
pack_app.command("replay")(guarded(replay))
register_schema_command(pack_app)  # pack schema

err = terminal(stderr=True)
out = terminal()

UrlOption = Annotated[str, typer.Option("--url", help="Database URL (sqlite:///FILE or postgresql://...)",
                                        envvar="CONVENGINE_DATABASE_URL")]


def show_version(value: bool) -> None:
    if value:
        from convengine import __version__

        out.print(f"convengine {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def options(
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of a failure")] = False,
    version: Annotated[bool, typer.Option("--version", callback=show_version, is_eager=True,
                                          help="Print the version and exit")] = False,
) -> None:
    """convengine: a data-driven conversational engine."""
    state.debug = debug


class ConvEngineConstraints(StrEnum):
    """``db upgrade --convengine-constraints``: what to do with a ConvEngine database's NOT NULLs."""

    keep = "keep"
    relax = "relax"


@db_app.command("upgrade")
@guarded
def db_upgrade(
    url: UrlOption = DEFAULT_DATABASE_URL,
    constraints: Annotated[ConvEngineConstraints | None, typer.Option(
        "--convengine-constraints",
        help="A ConvEngine database: keep its NOT NULL constraints (a Java ConvEngine still shares it), or "
             "relax them now after an earlier keep (default: relax them when it is first upgraded)")] = None,
) -> None:
    """Create or upgrade the ce_* tables (safe to run again); every change is printed, with why."""
    from convengine.db import parse_database_url, upgrade

    try:
        parsed = parse_database_url(url)
        changes = upgrade(parsed, convengine_constraints=constraints.value if constraints else None)
    except ConvEngineError as exc:
        fail(exc)
    for change in changes:
        out.print(inert(f"upgraded: {change}"))
    out.print(inert(f"ce_* tables are up to date at {parsed.redacted()}"))


@pack_app.command("validate")
@guarded
def pack_validate(
    file: Annotated[Path, typer.Argument(help="The pack (YAML)")],
    tasks: Annotated[Path | None, typer.Option("--tasks", help="Python file defining TASKS, to check the tasks the "
                                                               "pack calls (default: <pack>_tasks.py)")] = None,
) -> None:
    """Check a pack: every violation is listed with table, row, column and reason; warnings name
    what is accepted but will not work (unknown variables, settings nothing reads, tasks not defined)."""
    from convengine.config_loader import validate_pack
    from convengine.config_loader.companions import pack_warnings
    from convengine.versions.content import pack_id

    try:
        snapshot = validate_pack(file)
        identity = pack_id(file)
    except ConvEngineError as exc:
        fail(exc)
    for warning in pack_warnings(file, snapshot, tasks):
        err.print(Text.assemble(("warning", "yellow"), " ", inert(warning)))
    rows = sum(len(r) for r in snapshot.tables().values())
    out.print(inert(f"{file}: valid ({rows} rows, configuration {identity})"))


@pack_app.command("import")
@guarded
def pack_import(
    file: Annotated[Path, typer.Argument(help="The pack (YAML)")],
    url: UrlOption = DEFAULT_DATABASE_URL,
) -> None:
    """Replace the control tables with a pack's rows, all or nothing."""
    from convengine.config_loader import import_pack, read_control_rows
    from convengine.config_loader.identity import configuration_id
    from convengine.db import create_sync_engine, parse_database_url, upgrade
    from convengine.versions.lifecycle import record_import

    try:
        parsed = parse_database_url(url)
        engine = create_sync_engine(parsed)
        upgrade(engine)
        snapshot = import_pack(engine, file, on_change=record_import)
        identity = configuration_id(read_control_rows(engine))
        engine.dispose()
    except ConvEngineError as exc:
        fail(exc)
    rows = sum(len(r) for r in snapshot.tables().values())
    out.print(inert(f"imported {file} into {parsed.redacted()} ({rows} rows, configuration {identity})"))


@pack_app.command("export")
@guarded
def pack_export(
    url: UrlOption = DEFAULT_DATABASE_URL,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to FILE instead of stdout")] = None,
    include_secrets: Annotated[bool, typer.Option(
        "--include-secrets", help="Write secrets (database URL passwords, API keys, tokens) as stored "
                                  "instead of ***; ${env:NAME} references are always kept")] = False,
) -> None:
    """Write the control tables as a pack (YAML), secrets masked unless --include-secrets."""
    from convengine.cli.guard import require_existing_sqlite
    from convengine.config_loader import dump_pack, export_pack
    from convengine.config_loader.packs import redact_pack
    from convengine.db import create_sync_engine, parse_database_url
    from convengine.db.generations import unsupported_tables, unsupported_warning

    try:
        parsed = parse_database_url(url)
        require_existing_sqlite(parsed)
        engine = create_sync_engine(parsed)
        pack, masked = (export_pack(engine), 0) if include_secrets else redact_pack(export_pack(engine))
        text = dump_pack(pack)
        with engine.connect() as conn:
            unsupported = unsupported_warning(unsupported_tables(conn), where=parsed.redacted())
        engine.dispose()
    except ConvEngineError as exc:
        fail(exc)
    if unsupported:
        err.print(Text.assemble(("warning", "yellow"), " ", inert(unsupported)), soft_wrap=True)
    if masked:
        err.print(f"masked {masked} secret value{'s' if masked > 1 else ''} as ***; use ${{env:NAME}} "
                  "references in the pack, or --include-secrets to export them", highlight=False)
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        err.print(inert(f"wrote {output}"))


@app.command("chat")
@guarded
def chat(
    url: UrlOption = DEFAULT_DATABASE_URL,
    pack: Annotated[Path | None, typer.Option("--pack", help="Pack to load (default: the bundled support desk)")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="Python file defining TASKS (default: <pack>_tasks.py)")] = None,
    scripted: Annotated[Path | None, typer.Option("--scripted", help="Python file defining LLM (e.g. a ScriptedLLM)")] = None,
    conversation: Annotated[str | None, typer.Option("--conversation", help="Continue this conversation id")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="Show each turn's step trace")] = False,
    llm: Annotated[str, typer.Option("--llm", help="auto (OpenAI when OPENAI_API_KEY/OPENAI_BASE_URL is set), "
                                                   "openai, or none")] = "auto",
    replace: Annotated[bool, typer.Option("--replace", help="Replace the configuration stored in the database "
                                                            "with --pack")] = False,
    draft: Annotated[bool, typer.Option("--draft", help="Run on the draft configuration (the simulator): "
                                                        "nothing is published")] = False,
) -> None:
    """Talk to the engine in the terminal (also reads piped stdin, one message per line).

    A database that already holds configuration is used as it is; --pack with a different
    configuration needs --replace. An empty database gets --pack or the bundled support desk."""
    from convengine.cli.chat import open_chat_engine, run_chat

    try:
        engine = open_chat_engine(url, pack, tasks, scripted, llm, replace=replace)
    except ConvEngineError as exc:
        fail(exc)
    for warning in engine.warnings:
        err.print(Text.assemble(("warning", "yellow"), " ", inert(warning)), soft_wrap=True)
    try:
        code = run_chat(engine, conversation_id=conversation, trace=trace, console=out, draft=draft)
    finally:
        engine.close()
    raise typer.Exit(code)


@app.command("serve")
@guarded
def serve(
    url: UrlOption = DEFAULT_DATABASE_URL,
    pack: Annotated[Path | None, typer.Option("--pack", help="Pack to import at startup")] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on")] = 8080,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="Python file defining TASKS (default: <pack>_tasks.py)")] = None,
    scripted: Annotated[Path | None, typer.Option("--scripted", help="Python file defining LLM")] = None,
    llm: Annotated[str, typer.Option("--llm", help="auto, openai or none")] = "auto",
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", help="Origin allowed to call the API from a browser (repeatable; also "
                              "api.cors.allowed_origins)")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Server processes sharing the port and the "
                                         "database (more than 1 needs PostgreSQL; see docs/deployment.md)")] = 1,
    tests: Annotated[list[Path] | None, typer.Option(
        "--tests", help="Conversation tests every publish through the API must pass (repeatable)")] = None,
    channel: Annotated[str, typer.Option("--channel", help="The configuration channel to serve")] = LIVE_CHANNEL,
    replace: Annotated[bool, typer.Option("--replace", help="Replace the configuration stored in the database "
                                                            "with --pack")] = False,
    reload: Annotated[bool, typer.Option("--reload", help="Re-import --pack whenever the file changes "
                                                          "(one worker; restart for Python changes)")] = False,
) -> None:
    """Serve ConvEngine's REST API (message, audit, trace, SSE stream, cache), the console at /console and
    the OpenAPI docs at /docs; prints those addresses once it listens.

    A database that already holds configuration is served as it is; --pack with a different
    configuration needs --replace. Beyond loopback (--host 0.0.0.0) authentication is required: set
    CONVENGINE_API__AUTH__API_KEYS (see docs/security.md)."""
    from convengine._internal.extras import needs_extra

    with needs_extra("api", "convengine serve"):
        from convengine.api.serving import ServeHooks
        from convengine.api.serving import serve as serve_api
        from convengine.api.workers import ServeSpec, serve_workers

    spec = ServeSpec(url=url, host=host, pack=str(pack) if pack else None, tasks=str(tasks) if tasks else None,
                     scripted=str(scripted) if scripted else None, llm=llm, cors_origins=tuple(cors_origin or ()),
                     tests=tuple(str(t) for t in tests or ()), channel=channel, replace=replace)
    try:
        check_reload(reload, pack, workers)
        if workers > 1:
            serve_workers(spec, workers, port=port, log_level=log_level,
                          announce=partial(tell_addresses, host, port))
        else:
            serve_api(url, spec.engine_options(), host=host, port=port, log_level=log_level,
                      cors_origins=spec.cors_origins, hooks=ServeHooks(tell, pack if reload else None))
    except ConvEngineError as exc:
        fail(exc)


def tell(line: str) -> None:
    """One line of ``serve``'s own output (its addresses, each reload), printed at once."""
    out.print(inert(line), soft_wrap=True, highlight=False)


def tell_addresses(host: str, port: int) -> None:
    from convengine.api.serving import addresses

    for line in addresses(host, port):
        tell(line)


def check_reload(reload: bool, pack: Path | None, workers: int) -> None:
    if reload and pack is None:
        raise ConfigError("--reload re-imports the pack file when it changes: give it with --pack")
    if reload and workers > 1:
        raise ConfigError("--reload works with one worker (--workers 1): it is for editing a pack")


@app.command("test")
@guarded
def test(
    paths: Annotated[list[Path], typer.Argument(help="*.conv.yaml files or folders holding them")],
    url: Annotated[str | None, typer.Option("--url", help="Database (default: a temporary SQLite file per file)")] = None,
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", help="Also write JUnit XML here")] = None,
) -> None:
    """Run conversation tests; prints each failure with the turn's trace, exits 1 if any failed."""
    from convengine.engine import Engine
    from convengine.testing import FileRun, discover, load_test_file
    from convengine.testing.report import junit_xml as render_junit

    files = discover(list(paths))
    if not files:
        err.print("no *.conv.yaml files found")
        raise typer.Exit(1)
    outcomes = []
    for file in files:
        try:
            results = FileRun(load_test_file(file), url, open_engine=Engine.open).run()
        except ConvEngineError as exc:
            fail(exc)
        for outcome in results:
            mark = ("PASS", "green") if outcome.passed else ("FAIL", "red")
            out.print(Text.assemble(mark, " ", inert(f"{file.name} :: {outcome.name} ({outcome.seconds:.2f}s)")),
                      soft_wrap=True)
            if not outcome.passed:
                out.print(inert(outcome.report()), soft_wrap=True)
        outcomes.extend(results)
    failed = sum(1 for o in outcomes if not o.passed)
    out.print(f"{len(outcomes) - failed} passed, {failed} failed")
    if junit_xml is not None:
        junit_xml.parent.mkdir(parents=True, exist_ok=True)
        junit_xml.write_text(render_junit(outcomes), encoding="utf-8")
    raise typer.Exit(1 if failed else 0)
