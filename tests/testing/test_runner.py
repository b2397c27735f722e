"""The conversation-test runner: passing files pass, failing ones fail with readable messages."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from convengine.catalog.errors import ConfigError
from convengine.testing import run_file
from tests.conftest import EXAMPLES, PACKS

HELLO = {"user": "hello"}


def write(tmp_path: Path, tests: list[dict], name: str = "case.conv.yaml", **top: object) -> Path:
    path = tmp_path / name
    data = {"pack": str(PACKS / "api_pack.yaml"), "tests": tests, **top}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def only_failure(path: Path) -> str:
    [outcome] = run_file(path)
    assert not outcome.passed
    return outcome.report()


FAILING = [
    ({"expect": {"intent": "LOAN"}}, "intent: expected 'LOAN', got 'GREETING'"),
    ({"expect": {"state": "DONE"}}, "state: expected 'DONE', got 'IDLE'"),
    ({"expect": {"payload": "Goodbye"}}, "payload: expected 'Goodbye', got 'Hello there'"),
    ({"expect": {"payload": {"contains": "Howdy"}}}, "payload: expected it to contain 'Howdy', got 'Hello there'"),
    ({"expect": {"payload": {"regex": "^Bye"}}}, "payload: expected it to match /^Bye/, got 'Hello there'"),
    ({"expect": {"payload": {"type": "JSON"}}}, "payload type: expected JSON, got TEXT"),
    ({"expect": {"context": {"customer.id": 7}}}, "context.customer.id: expected 7, but it is missing"),
    ({"expect": {"stages": ["RESPONSE_EXACT", "USER_INPUT"]}}, "stage USER_INPUT out of order"),
    ({"expect": {"stages": ["TOOL_ORCHESTRATION_RESULT"]}}, "stage TOOL_ORCHESTRATION_RESULT missing"),
    ({"expect": {"absent_stages": ["USER_INPUT"]}}, "stage USER_INPUT should not appear"),
    ({"expect": {"llm_calls": {"DIALOGUE_ACT": 1}}}, "LLM calls to DIALOGUE_ACT: expected 1, got 0"),
    ({"expect": {"error": "LLM_TIMEOUT"}}, "error: expected LLM_TIMEOUT, got none"),
    ({"expect": {"tool_calls": {"crm.lookup": 1}}}, "tool crm.lookup: expected 1 call(s), got 0"),
]


@pytest.mark.parametrize(("turn", "message"), FAILING, ids=[m.split(":")[0] for _, m in FAILING])
def test_a_failing_expectation_fails_with_its_message(tmp_path: Path, turn: dict, message: str) -> None:
    report = only_failure(write(tmp_path, [{"name": "fails", "turns": [{**HELLO, **turn}]}]))
    assert message in report
    assert "turn 1 ('hello') got GREETING/IDLE: 'Hello there'" in report
    assert "  intent_resolution: INTENT_RESOLVE_START INTENT_CLASSIFICATION_MATCHED" in report  # the trace


def test_an_unexpected_error_and_unexpected_llm_calls_are_reported(tmp_path: Path) -> None:
    tests = [{"name": "llm", "llm": {"INTENT_AGENT": [{"intent": "LOAN", "confidence": 0.9}]},
              "turns": [{"user": "something odd", "expect": {"llm_calls": {}}}]},
             {"name": "error", "llm": {"INTENT_AGENT": ["{broken"]}, "turns": [{"user": "odd", "expect": {}}]}]
    first, second = run_file(write(tmp_path, tests))
    assert "LLM calls to INTENT_AGENT: expected none, got 1" in first.report()
    assert "error: expected none, got LLM_INVALID_RESPONSE" in second.report()


def test_tool_stubs_and_tool_call_arguments(tmp_path: Path) -> None:
    pack = {"settings": {"flow": {"dialogue-act": {"resolute": "REGEX_ONLY"}}},
            "ce_intent": [{"intent_code": "LOAN", "description": "loans"}],
            "ce_intent_classifier": [{"intent_code": "LOAN", "state_code": "START", "rule_type": "CONTAINS",
                                      "pattern": "loan", "priority": 1}],
            "ce_mcp_tool": [{"tool_code": "crm.lookup", "tool_group": "HTTP_API", "intent_code": "LOAN",
                             "state_code": "START"}],
            "ce_response": [{"intent_code": "LOAN", "state_code": "START", "exact_text": "{{tool_result.status}}"}]}
    (tmp_path / "pack.yaml").write_text(yaml.safe_dump(pack))
    request = {"tool_code": "crm.lookup", "args": {"id": 1}}
    tests = [{"name": "stubbed", "tools": {"crm.lookup": [{"result": {"ok": True}}, {"error": "crm down"}]},
              "turns": [{"user": "loan", "params": {"tool_request": request},
                         "expect": {"payload": "SUCCESS", "tool_calls": {"crm.lookup": [{"id": 1}]}}},
                        {"user": "loan", "params": {"tool_request": request},
                         "expect": {"payload": "ERROR", "tool_calls": {"crm.lookup": [{"id": 2}]}}}]}]
    report = only_failure(write(tmp_path, tests, pack=str(tmp_path / "pack.yaml")))
    assert "tool crm.lookup: expected calls [{'id': 2}], got [{'id': 1}]" in report
    assert "turn 1" not in report  # the first turn passed


def test_malformed_test_files_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conv.yaml"
    bad.write_text(yaml.safe_dump({"pack": "x.yaml", "tests": [{"name": "t", "turns": [{"usr": "hi"}]}]}))
    with pytest.raises(ConfigError, match=r"tests\.0\.turns\.0\.user: Field required"):
        run_file(bad)
    missing = write(tmp_path, [{"name": "t", "turns": [HELLO]}], name="nopack.conv.yaml", pack="nowhere.yaml")
    [outcome] = run_file(missing)
    assert "cannot open the engine: pack file not found" in outcome.report()


def test_the_example_packs_ship_passing_conversation_tests() -> None:
    outcomes = run_file(EXAMPLES / "support_desk.conv.yaml") + run_file(EXAMPLES / "loan_application.conv.yaml")
    assert outcomes and all(o.passed for o in outcomes), [o.report() for o in outcomes if not o.passed]


def test_cli_exit_codes_output_and_junit_xml(tmp_path: Path) -> None:
    failing = write(tmp_path, [{"name": "good", "turns": [{**HELLO, "expect": {"intent": "GREETING"}}]},
                               {"name": "bad", "turns": [{**HELLO, "expect": {"state": "NOPE"}}]}])
    junit = tmp_path / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "convengine.cli", "test", str(failing), "--junit-xml", str(junit)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "PASS case.conv.yaml :: good" in done.stdout and "FAIL case.conv.yaml :: bad" in done.stdout
    assert "state: expected 'NOPE', got 'IDLE'" in done.stdout and "1 passed, 1 failed" in done.stdout
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failure = suite.find(".//testcase[@name='bad']/failure")
    assert failure is not None and "state: expected 'NOPE'" in (failure.text or "")
    ok = subprocess.run([sys.executable, "-m", "convengine.cli", "test", str(EXAMPLES)], capture_output=True,
                        text=True, timeout=120, check=False)
    assert ok.returncode == 0 and "0 failed" in ok.stdout


def test_pytest_collects_conversation_files(tmp_path: Path) -> None:
    write(tmp_path, [{"name": "good", "turns": [{**HELLO, "expect": {"intent": "GREETING"}}]},
                     {"name": "bad", "turns": [{**HELLO, "expect": {"payload": {"contains": "Howdy"}}}]}])
    done = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 passed" in done.stdout
    assert "payload: expected it to contain 'Howdy', got 'Hello there'" in done.stdout
