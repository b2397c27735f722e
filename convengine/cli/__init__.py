"""Command-line interface (typer + rich)."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``convengine`` command."""
    from convengine.cli.app import app

    app()


__all__ = ["main"]
