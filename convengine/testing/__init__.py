"""Conversation tests: YAML files of turns and expectations, run by `convengine test` and pytest."""

from __future__ import annotations

from pathlib import Path

from convengine.engine import conversation_tests as runner
from convengine.engine.conversation_specs import load_test_file
from convengine.engine.conversation_tests import FileRun, TestOutcome, discover

__all__ = ["FileRun", "TestOutcome", "discover", "load_test_file", "run_file"]


def run_file(path: str | Path, *, url: str | None = None) -> list[TestOutcome]:
    """Every test of one ``*.conv.yaml`` file, on an engine of its pack (a temporary SQLite database
    unless ``url`` names one)."""
    # Imported here: the engine imports the runner (publishing a version runs conversation tests), so
    # the runner's package cannot import the engine while it loads.
    from convengine.engine import Engine

    return runner.run_file(path, url=url, open_engine=Engine.open)
