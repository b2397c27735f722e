"""pytest plugin: every ``*.conv.yaml`` file is a module of conversation tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convengine.engine import Engine
from convengine.engine.conversation_specs import load_test_file
from convengine.engine.conversation_tests import FileRun, TestOutcome
from convengine.security.terminal import visible


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--convengine-url", default=None,
                     help="database for conversation tests (default: a temporary SQLite file per test file)")


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name.endswith(".conv.yaml"):
        return ConversationFile.from_parent(parent, path=file_path)
    return None


class ConversationTestFailed(Exception):
    pass


class ConversationFile(pytest.File):
    _outcomes: dict[str, TestOutcome] | None = None

    def collect(self) -> Any:
        spec = load_test_file(self.path)
        for test in spec.tests:
            yield ConversationItem.from_parent(self, name=test.name)

    def outcome(self, name: str) -> TestOutcome:
        if self._outcomes is None:
            spec = load_test_file(self.path)
            url = self.config.getoption("--convengine-url")
            self._outcomes = {o.name: o for o in FileRun(spec, url, open_engine=Engine.open).run()}
        return self._outcomes[name]


class ConversationItem(pytest.Item):
    def runtest(self) -> None:
        assert isinstance(self.parent, ConversationFile)
        outcome = self.parent.outcome(self.name)
        if not outcome.passed:
            raise ConversationTestFailed(outcome.report())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: str | None = None) -> str:
        if isinstance(excinfo.value, ConversationTestFailed):
            return visible(str(excinfo.value))  # replies and inputs: no escape sequence reaches the terminal
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"conversation test: {self.name}"
