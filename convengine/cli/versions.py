"""``convengine pack versions|draft|diff|publish|rollback|channel``: the version lifecycle from the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.text import Text

from convengine.catalog.defaults import DEFAULT_DATABASE_URL, LIVE_CHANNEL
from convengine.catalog.errors import ConvEngineError
from convengine.cli.guard import fail, guarded, terminal
from convengine.security.terminal import inert

if TYPE_CHECKING:
    from convengine.versions import Versions
    from convengine.versions.lifecycle import ReplayVerdict

out = terminal()
err = terminal(stderr=True)

UrlOption = Annotated[str, typer.Option("--url", help="Database URL (sqlite:///FILE or postgresql://...)",
                                        envvar="CONVENGINE_DATABASE_URL")]
AuthorOption = Annotated[str, typer.Option("--author", help="Who makes the change (kept with it)",
                                           envvar="USER")]
MessageOption = Annotated[str | None, typer.Option("-m", "--message", help="Why (kept with the change)")]
ChannelOption = Annotated[str, typer.Option("--channel", help="The channel (environment) to change")]


def _fail(exc: ConvEngineError) -> None:
    fail(exc)


def _refused(exc: ConvEngineError) -> NoReturn:
    """A refusal of the gate (a failed test, an ungated version, an unnamed draft): its code and whole
    report, exit code 1."""
    err.print(Text.assemble((exc.code.value, "red"), " ", inert(exc.message)), soft_wrap=True)
    raise typer.Exit(1) from None


def _resolve(versions: object, ref: str) -> int:
    """A version number, or a channel name (``production``, ``draft``, ``staging``...) for its version."""
    from convengine.versions.manager import Versions

    assert isinstance(versions, Versions)
    if ref.isdigit():
        return int(ref)
    return versions.channel(ref).version


def register(pack_app: typer.Typer) -> None:
    """Add the version commands to ``convengine pack``."""
    pack_app.command("versions")(guarded(list_versions))
    pack_app.command("draft")(guarded(draft))
    pack_app.command("diff")(guarded(diff))
    pack_app.command("publish")(guarded(publish))
    pack_app.command("rollback")(guarded(rollback))
    pack_app.command("channel")(guarded(channel))


def list_versions(url: UrlOption = DEFAULT_DATABASE_URL) -> None:
    """List the configuration versions and the channels that serve them."""
    from convengine.versions import Versions

    try:
        with Versions.open(url) as versions:
            rows, channels = versions.list(), versions.channels()
    except ConvEngineError as exc:
        _fail(exc)
    served: dict[int, list[str]] = {}
    for ch in channels:
        served.setdefault(ch.version, []).append(ch.name)
    for info in rows:
        names = f"  ({', '.join(served[info.number])})" if info.number in served else ""
        out.print(inert(f"{info.number:>4}  {info.hash[:12]}  {info.created_at:%Y-%m-%d %H:%M}  "
                        f"{info.author}: {info.message or ''}{names}"), soft_wrap=True)


def draft(
    file: Annotated[Path, typer.Argument(help="The pack (YAML) the draft holds")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    author: AuthorOption = "cli",
    message: MessageOption = None,
) -> None:
    """Make a pack the draft (a new version); what users get does not change until it is published."""
    from convengine.versions import Versions

    try:
        with Versions.open(url) as versions:
            info = versions.draft(file, author=author, message=message)
    except ConvEngineError as exc:
        _fail(exc)
    out.print(inert(f"draft: version {info.number} ({info.hash[:12]})"))


def diff(
    a: Annotated[str, typer.Argument(help="A version number or channel name (e.g. production)")],
    b: Annotated[str, typer.Argument(help="A version number or channel name (e.g. draft)")],
    url: UrlOption = DEFAULT_DATABASE_URL,
) -> None:
    """Show what changed from A to B, table by table and row by row."""
    from convengine.versions import Versions
    from convengine.versions.diff import render

    try:
        with Versions.open(url) as versions:
            first, second = _resolve(versions, a), _resolve(versions, b)
            text = render(versions.diff(first, second), first, second)
    except ConvEngineError as exc:
        _fail(exc)
    out.print(inert(text), end="", soft_wrap=True)


def publish(
    url: UrlOption = DEFAULT_DATABASE_URL,
    tests: Annotated[list[Path] | None, typer.Option(
        "--tests", help="Conversation tests (*.conv.yaml files or folders) the draft must pass")] = None,
    channel: ChannelOption = LIVE_CHANNEL,
    version: Annotated[int | None, typer.Option("--version", help="Publish this version instead of the draft")] = None,
    draft: Annotated[int | None, typer.Option(
        "--draft", help="The draft to publish (its version number); needed when it holds another author's edits")] = None,
    author: AuthorOption = "cli",
    message: MessageOption = None,
    accept_changes: Annotated[bool, typer.Option(
        "--accept-changes", help="Publish even when the replay gate finds more changed conversations than "
                                 "versions.replay_gate.max_changed (kept in the channel's history)")] = False,
) -> None:
    """Publish the draft: only when it validates and every conversation test passes against it (and,
    with versions.replay_gate.max_changed set, the replay of the last conversations changes few enough)."""
    from convengine.engine import Engine
    from convengine.engine.publish_gate import conversation_test_gate
    from convengine.versions import Versions
    from convengine.versions.lifecycle import DraftNotNamedError, PublishRefusedError, ReplayChangedError

    try:
        with Versions.open(url, gate=conversation_test_gate(Engine.open)) as versions:
            versions.replay_gate = lambda number: _verdict(url, versions, number)
            done = versions.publish(channel=channel, version=version, draft=draft, tests=tests or [],
                                    author=author, message=message, accept_changes=accept_changes)
    except (PublishRefusedError, DraftNotNamedError, ReplayChangedError) as refused:  # the whole report: which test failed and why
        _refused(refused)
    except ConvEngineError as exc:
        _fail(exc)
    passed = f", {len(done.tests_passed)} conversation tests passed" if done.tests_passed else \
        ", no conversation tests given (--tests)"
    out.print(inert(f"published version {done.version.number} on {done.channel}{passed}"))


def _verdict(url: str, versions: Versions, number: int) -> ReplayVerdict | None:
    """The replay gate on the database's recorded conversations: an engine is opened for it only when
    the published configuration (or the environment) sets ``versions.replay_gate.max_changed``."""
    from convengine.engine import Engine
    from convengine.settings import EngineSettings

    live = versions.content(versions.published_version)
    settings, _unknown = EngineSettings.build_tolerant(pack_settings=live.get("settings"))
    if settings.versions.replay_gate.max_changed is None:
        return None
    with Engine.open(url) as engine:
        return engine.replay_verdict(number)


def rollback(
    version: Annotated[int, typer.Argument(help="The earlier version to serve again")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    channel: ChannelOption = LIVE_CHANNEL,
    author: AuthorOption = "cli",
    message: MessageOption = None,
) -> None:
    """Serve an earlier version again; conversations keep the version they started on."""
    from convengine.versions import Versions

    try:
        with Versions.open(url) as versions:
            done = versions.rollback(version, channel=channel, author=author, message=message)
    except ConvEngineError as exc:
        _fail(exc)
    out.print(inert(f"rolled {done.channel} back to version {done.version.number}"))


def channel(
    name: Annotated[str, typer.Argument(help="The channel, e.g. staging")],
    version: Annotated[str, typer.Argument(help="A version number, or a channel whose version to take")],
    url: UrlOption = DEFAULT_DATABASE_URL,
    migration: Annotated[str | None, typer.Option(
        "--migration", help="pin (conversations keep their version) or latest (they move at their next turn)")] = None,
    gated: Annotated[bool | None, typer.Option(
        "--gated/--ungated", help="Serve only versions that passed the publish gate (production always does)")] = None,
    override: Annotated[str | None, typer.Option(
        "--override", help="Why a gated channel may take a version that did not pass the gate (audited)")] = None,
    author: AuthorOption = "cli",
    message: MessageOption = None,
) -> None:
    """Point a channel (an environment such as staging) at a version (validated, not tested); a gated
    channel such as production takes only a published version, unless --override says why."""
    from convengine.versions import Versions
    from convengine.versions.lifecycle import OVERRIDE_ACTION, GateRequiredError

    try:
        with Versions.open(url) as versions:
            number = _resolve(versions, version)
            done = versions.point(name, number, migration=migration, author=author, message=message,
                                  override=override, gated=gated)
    except GateRequiredError as refused:
        _refused(refused)
    except ConvEngineError as exc:
        _fail(exc)
    note = " (gate overridden)" if done.action == OVERRIDE_ACTION else ""
    out.print(inert(f"{done.channel} serves version {done.version.number}{note}"))
