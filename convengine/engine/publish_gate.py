"""Running a pack's conversation tests (``*.conv.yaml``) against a version before it is published."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from convengine.config_loader.companions import pack_options
from convengine.engine.conversation_specs import load_test_file
from convengine.engine.conversation_tests import FileRun, OpenEngine, RunnableEngine, TestOutcome, discover
from convengine.versions.lifecycle import TestGate


class VersionFileRun(FileRun):
    """One test file run on ``content`` instead of the pack the file names (its tasks, tools and
    settings are kept: they are the host's code, the version is what is under test)."""

    def __init__(self, path: Path, content: Mapping[str, Any], open_engine: OpenEngine) -> None:
        super().__init__(load_test_file(path), open_engine=open_engine)
        self.content = dict(content)

    def _engine(self, workdir: Path) -> RunnableEngine:
        spec = self.spec
        tasks = spec.resolve(spec.tasks) if spec.tasks else None
        options = pack_options(spec.resolve(spec.pack), tasks)
        options["pack"] = self.content
        codes = {code for test in spec.tests for code in test.tools}
        options["tools"] = {**dict(options.get("tools") or {}), **{c: self.stubs.handler(c) for c in codes}}
        if any(test.llm or test.llm_default is not None for test in spec.tests):
            options["llm"] = self.llm
        return self.open_engine(f"sqlite:///{workdir / 'version-tests.db'}", **options, **spec.settings)


def run_tests(content: Mapping[str, Any], paths: Sequence[str | Path], open_engine: OpenEngine) -> list[TestOutcome]:
    """Every test of every ``*.conv.yaml`` under ``paths``, run against ``content`` on engines that
    ``open_engine`` (``Engine.open``) opens."""
    outcomes: list[TestOutcome] = []
    for path in discover(list(paths)):
        outcomes.extend(VersionFileRun(path, content, open_engine).run())
    return outcomes


def conversation_test_gate(open_engine: OpenEngine) -> TestGate:
    """The gate publishing runs: the conversation tests, on engines ``open_engine`` opens (``Engine.open``,
    passed in because the engine itself publishes)."""
    return lambda content, paths: run_tests(content, paths, open_engine)
