"""Running a pack's conversation tests (``*.conv.yaml``) against a version before it is published."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from convengine.engine import Engine
from convengine.testing.runner import FileRun, TestOutcome, discover
from convengine.testing.spec import load_test_file


class VersionFileRun(FileRun):
    """One test file run on ``content`` instead of the pack the file names (its tasks, tools and
    settings are kept: they are the host's code, the version is what is under test)."""

    def __init__(self, path: Path, content: Mapping[str, Any]) -> None:
        super().__init__(load_test_file(path))
        self.content = dict(content)

    def _engine(self, workdir: Path) -> Engine:
        from convengine.cli.support import pack_options

        spec = self.spec
        tasks = spec.resolve(spec.tasks) if spec.tasks else None
        options = pack_options(spec.resolve(spec.pack), tasks)
        options["pack"] = self.content
        codes = {code for test in spec.tests for code in test.tools}
        options["tools"] = {**dict(options.get("tools") or {}), **{c: self.stubs.handler(c) for c in codes}}
        if any(test.llm or test.llm_default is not None for test in spec.tests):
            options["llm"] = self.llm
        return Engine.open(f"sqlite:///{workdir / 'version-tests.db'}", **options, **spec.settings)


def run_tests(content: Mapping[str, Any], paths: Sequence[str | Path]) -> list[TestOutcome]:
    """Every test of every ``*.conv.yaml`` under ``paths``, run against ``content``."""
    outcomes: list[TestOutcome] = []
    for path in discover(list(paths)):
        outcomes.extend(VersionFileRun(path, content).run())
    return outcomes
