"""``convengine init [DIR]``: a new pack with its tasks module, conversation tests and a README,
which pass ``convengine test`` as made."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Annotated

import typer

from convengine.catalog.errors import ConfigError
from convengine.cli.guard import guarded, terminal
from convengine.security.terminal import inert

out = terminal()

FILES = {"pack.yaml.tmpl": "{name}.yaml", "tasks.py.tmpl": "{name}_tasks.py", "conv.yaml.tmpl": "{name}.conv.yaml",
         "README.md.tmpl": "README.md"}
"""Template (in convengine/cli/scaffold/) -> the file it becomes."""


def pack_name(folder: Path, name: str | None) -> str:
    """A file-name stem that is also a Python module name: ``name``, else the folder's name."""
    raw = name or folder.resolve().name
    stem = re.sub(r"\W+", "_", raw).strip("_").lower()
    if not stem or stem[0].isdigit():
        stem = f"pack_{stem}" if stem else "assistant"
    return stem


def scaffold(folder: Path, name: str) -> list[Path]:
    """Write the files into ``folder`` (made if missing); refuses to overwrite any of them."""
    targets = {template: folder / target.format(name=name) for template, target in FILES.items()}
    existing = [str(path) for path in targets.values() if path.exists()]
    if existing:
        raise ConfigError(f"not overwriting {', '.join(existing)}: choose another folder or --name")
    folder.mkdir(parents=True, exist_ok=True)
    source = resources.files("convengine.cli") / "scaffold"
    for template, path in targets.items():
        text = Template((source / template).read_text(encoding="utf-8")).safe_substitute(name=name)
        path.write_text(text, encoding="utf-8")
    return list(targets.values())


@guarded
def init(
    folder: Annotated[Path, typer.Argument(help="Where to make the pack (created if missing)")] = Path("."),
    name: Annotated[str | None, typer.Option("--name", help="The pack's name (default: the folder's name)")] = None,
) -> None:
    """Make a new pack in FOLDER: NAME.yaml, its Python tasks NAME_tasks.py, conversation tests
    NAME.conv.yaml and a README; `convengine test FOLDER` passes at once."""
    chosen = pack_name(folder, name)
    for path in scaffold(folder, chosen):
        out.print(inert(f"created {path}"), soft_wrap=True, highlight=False)
    pack, tests = folder / f"{chosen}.yaml", folder / f"{chosen}.conv.yaml"
    out.print(inert(f"next: convengine test {tests}  |  convengine chat --url sqlite:///{folder / chosen}.db "
                    f"--pack {pack}"), soft_wrap=True, highlight=False)
