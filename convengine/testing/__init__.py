"""Conversation tests: YAML files of turns and expectations, run by `convengine test` and pytest."""

from convengine.testing.runner import FileRun, TestOutcome, discover, run_file
from convengine.testing.spec import load_test_file

__all__ = ["FileRun", "TestOutcome", "discover", "load_test_file", "run_file"]
