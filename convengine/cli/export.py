"""``convengine export-test``: a recorded conversation as a ``.conv.yaml`` test that replays it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from convengine.catalog.defaults import DEFAULT_DATABASE_URL
from convengine.cli.guard import guarded, terminal
from convengine.security.terminal import inert

err = terminal(stderr=True)


@guarded
def export_test(
    conversation_id: Annotated[str, typer.Argument(help="The conversation to export")],
    pack: Annotated[Path, typer.Option("--pack", help="The pack the test runs against (named relative to OUTPUT)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The .conv.yaml file to write")],
    url: Annotated[str, typer.Option("--url", help="Database the conversation was recorded in",
                                     envvar="CONVENGINE_DATABASE_URL")] = DEFAULT_DATABASE_URL,
    upto: Annotated[int | None, typer.Option("--upto", min=1, help="Only the first N turns")] = None,
    tasks: Annotated[Path | None, typer.Option("--tasks", help="Python file defining TASKS (default: "
                                                               "<pack>_tasks.py, as chat finds it)")] = None,
) -> None:
    """Write a conversation test that replays a recorded conversation: its inputs, the LLM replies
    and tool results it got, and what happened as expectations (needs llm.log_calls on when recorded)."""
    from convengine.config_loader.companions import pack_options
    from convengine.console.export import relative_pack

    options = pack_options(pack, tasks)  # the pack's tasks, so the engine knows them (nothing is imported)
    options.pop("pack")
    text = asyncio.run(_export(url, conversation_id, relative_pack(pack, output), upto, options))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    err.print(inert(f"wrote {output}: run it with convengine test {output}"), soft_wrap=True)


async def _export(url: str, conversation_id: str, pack: str, upto: int | None, options: dict[str, Any]) -> str:
    from convengine.console.export import export_conversation
    from convengine.engine import Engine

    engine = await Engine.aopen(url, **options)
    try:
        return await export_conversation(engine, conversation_id, pack=pack, upto=upto)
    finally:
        await engine.aclose()
