"""What the CLI commands share: bundled examples, a pack's Python tasks, engine options."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from convengine.catalog.errors import ConfigError
from convengine.config.snapshot import ConfigSnapshot
from convengine.config_loader.requirements import unregistered_tasks

DEFAULT_PACK_NAME = "support_desk.yaml"


def examples_dir() -> Path:
    """The example packs: bundled in the wheel, or the repository's examples/ in a checkout."""
    package = Path(__file__).resolve().parent.parent  # the convengine package
    for candidate in (package / "_examples", package.parent / "examples"):
        if candidate.is_dir():
            return candidate
    raise ConfigError("the bundled example packs are missing from this installation")


def default_pack() -> Path:
    return examples_dir() / DEFAULT_PACK_NAME


def load_module(path: Path) -> ModuleType:
    """Import a Python file by path (a pack's tasks, tools or scripted replies)."""
    if not path.is_file():
        raise ConfigError(f"no such Python file: {path}")
    name = f"convengine_user_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def companion(pack: Path, suffix: str) -> Path | None:
    """``<pack stem>_<suffix>.py`` next to a pack, when it exists."""
    candidate = pack.with_name(f"{pack.stem}_{suffix}.py")
    return candidate if candidate.is_file() else None


def pack_options(pack: Path | None, tasks: Path | None = None, scripted: Path | None = None) -> dict[str, Any]:
    """Engine options a pack brings: its tasks (TASKS), tools (TOOLS) and scripted LLM (LLM), from
    ``tasks`` / ``scripted`` or the pack's companion ``<pack>_tasks.py``; without a pack (the
    configuration the database holds) only the files given."""
    options: dict[str, Any] = {} if pack is None else {"pack": pack}
    tasks_file = tasks or (companion(pack, "tasks") if pack is not None else None)
    if tasks_file is not None:
        module = load_module(tasks_file)
        for attr, option in (("TASKS", "tasks"), ("TOOLS", "tools"), ("CONTAINER_PROVIDERS", "container_providers"),
                             ("TRANSFORMERS", "response_transformers")):
            if hasattr(module, attr):
                options[option] = getattr(module, attr)
    if scripted is not None:
        module = load_module(scripted)
        if not hasattr(module, "LLM"):
            raise ConfigError(f"{scripted} must define LLM (a ScriptedLLM or a LangChain chat model)")
        options["llm"] = module.LLM
    return options


def choose_llm(choice: str) -> Any:
    """``auto``: OpenAI when OPENAI_API_KEY or OPENAI_BASE_URL is set, else none; ``openai``; ``none``."""
    choice = choice.lower()
    if choice == "none":
        return None
    if choice == "openai" or (choice == "auto" and (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))):
        return "openai"
    if choice != "auto":
        raise ConfigError(f"unknown --llm {choice!r}: use auto, openai or none")
    return None


def pack_warnings(pack: Path, snapshot: ConfigSnapshot, tasks: Path | None = None) -> list[str]:
    """A validated pack's warnings, plus the tasks it calls that its tasks file does not define."""
    tasks_file = tasks or companion(pack, "tasks")
    registered = getattr(load_module(tasks_file), "TASKS", {}) if tasks_file is not None else {}
    return [*snapshot.warnings, *unregistered_tasks(snapshot, registered)]
