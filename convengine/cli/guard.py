"""The CLI's front door: a command that cannot reach its database or load its configuration
prints one line with the cause and exits with code 2; ``convengine --debug ...`` shows the traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from convengine.catalog.errors import ConfigError, ConvEngineError, ErrorCode
from convengine.security.redact import redact_text
from convengine.security.terminal import inert

if TYPE_CHECKING:
    from convengine.db.url import DatabaseUrl

SETUP_FAILED = 2
"""Exit code of a command that could not do its work (database or configuration)."""

P = ParamSpec("P")
R = TypeVar("R")


def terminal(*, stderr: bool = False) -> Console:
    """The CLI's consoles: lines are never hard-wrapped (piped output would otherwise be cut at 80
    columns and padded with spaces); the terminal wraps long lines itself."""
    return Console(stderr=stderr, soft_wrap=True)


_err = terminal(stderr=True)


@dataclass
class CliState:
    debug: bool = False


state = CliState()


def report(code: str, message: str) -> None:
    """Print ``error [CODE] message`` (secrets masked, printed inertly) on stderr."""
    _err.print(Text.assemble(("error", "red"), " ", inert(f"[{code}] {redact_text(message)}")), soft_wrap=True)


def is_database_error(exc: BaseException) -> bool:
    """A SQLAlchemy error (looked up only if SQLAlchemy was imported: the CLI loads it on demand)."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.SQLAlchemyError)


def describe_database_error(exc: BaseException) -> str:
    """The driver's own words, on one line, with a hint when the ce_* tables are missing."""
    cause = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(cause).splitlines()
             if line.strip() and not line.strip().startswith(("(Background", "[SQL", "HINT"))]
    text = " ".join(lines) or type(cause).__name__
    if "no such table" in text or type(cause).__name__ == "UndefinedTable":
        text += " (the database has no ce_* tables: run `convengine db upgrade --url ...` first)"
    return f"cannot use the database: {text}"


def require_existing_sqlite(url: DatabaseUrl) -> None:
    """Refuse a SQLite file that does not exist (reading it would create an empty one)."""
    if url.sqlite_path is not None and not url.sqlite_path.exists():
        raise ConfigError(f"no database at {url.sqlite_path} (nothing to read; check --url)",
                          code=ErrorCode.DATABASE_UNAVAILABLE)


def guarded(command: Callable[P, R]) -> Callable[P, R]:
    """Turn database and configuration failures of ``command`` into one line and exit code 2."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except ConvEngineError as exc:
            if state.debug:
                raise
            report(exc.code.value, exc.message)
        except Exception as exc:
            database = is_database_error(exc)
            if state.debug or not (database or isinstance(exc, OSError)):
                raise
            report(ErrorCode.DATABASE_UNAVAILABLE.value, describe_database_error(exc)
                   if database else f"{type(exc).__name__}: {exc}")
        raise typer.Exit(SETUP_FAILED)

    return run


def fail(exc: ConvEngineError) -> NoReturn:
    """One line naming the code and the cause; exit code 2 (the command could not do its work)."""
    if state.debug:
        raise exc
    report(exc.code.value, exc.message)
    raise typer.Exit(SETUP_FAILED)
