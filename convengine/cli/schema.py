"""``convengine pack schema``: the JSON Schema of pack files, for editors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from convengine.security.terminal import inert

err = Console(stderr=True)


def pack_schema(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to FILE instead of stdout")] = None,
) -> None:
    """Write the JSON Schema of pack files (generated from the ce_* tables' columns).

    Editors check and complete a pack against it: start the pack with
    `# yaml-language-server: $schema=pack.schema.json` (the path of the written file, relative to the pack).
    """
    from convengine.config_loader.schema import pack_schema_text

    text = pack_schema_text()
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")
    err.print(inert(f"wrote {output}"))


def register(pack_app: typer.Typer) -> None:
    """Add ``schema`` to the ``pack`` commands."""
    pack_app.command("schema")(pack_schema)
