"""JUnit XML for CI systems, from conversation-test outcomes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from convengine.engine.conversation_tests import TestOutcome


def junit_xml(outcomes: list[TestOutcome]) -> str:
    suites = ET.Element("testsuites")
    by_file: dict[Path, list[TestOutcome]] = defaultdict(list)
    for outcome in outcomes:
        by_file[outcome.file].append(outcome)
    for file, tests in by_file.items():
        failed = sum(1 for t in tests if not t.passed)
        suite = ET.SubElement(suites, "testsuite", name=str(file), tests=str(len(tests)), failures=str(failed),
                              errors="0", time=f"{sum(t.seconds for t in tests):.3f}")
        for test in tests:
            case = ET.SubElement(suite, "testcase", classname=file.name, name=test.name, time=f"{test.seconds:.3f}")
            if not test.passed:
                report = test.report()
                failure = ET.SubElement(case, "failure", message=report.splitlines()[1].strip() if "\n" in report
                                        else report)
                failure.text = report
    suites.set("tests", str(len(outcomes)))
    suites.set("failures", str(sum(1 for t in outcomes if not t.passed)))
    return ET.tostring(suites, encoding="unicode")
