"""Bounded regexes and the text matchers of ce_policy / ce_intent_classifier rows: what a pack's
pattern may be, how each match type compares, and that a hostile pattern cannot hold a turn."""

from __future__ import annotations

import time

import pytest

from convengine._internal.textmatch import (
    PatternError,
    RegexTimeoutError,
    TextMatcher,
    compile_regex,
    linear_regex,
)


def test_a_linear_pattern_runs_on_re2_and_a_backtracking_one_on_the_bounded_engine() -> None:
    assert compile_regex(r"order\s+#?(\d+)").engine == "re2"
    looks_back = compile_regex(r"(?<=ref:)\d+")  # a look-behind needs backtracking
    assert looks_back.engine == "regex"
    assert looks_back.search("see ref:42").group(0) == "42"


def test_matching_ignores_case_like_convengine() -> None:
    assert compile_regex(r"cancel").search("Please CANCEL it") is not None
    assert compile_regex(r"(?<=x)y").search("XY") is not None


def test_fullmatch_needs_the_whole_text() -> None:
    pattern = compile_regex(r"\d{4}")
    assert pattern.fullmatch("2024") is not None
    assert pattern.fullmatch("in 2024") is None
    assert pattern.search("in 2024") is not None


def test_a_catastrophic_pattern_times_out_with_an_error_naming_it() -> None:
    slow = compile_regex(r"(a|aa)+(?=b)c", timeout_s=0.05)  # look-ahead: backtracking engine, exponential
    started = time.monotonic()
    with pytest.raises(RegexTimeoutError) as info:
        slow.search("a" * 60)
    assert time.monotonic() - started < 5
    assert "(a|aa)+(?=b)c" in info.value.message and "60-character input" in info.value.message


@pytest.mark.parametrize("pattern", ["(unclosed", "[z-a]", "a{2,1}"])
def test_a_broken_pattern_is_refused_with_the_engines_reason(pattern: str) -> None:
    with pytest.raises(PatternError) as info:
        compile_regex(pattern)
    assert str(info.value)


def test_a_pattern_must_be_text() -> None:
    with pytest.raises(PatternError, match="pattern must be text, got int"):
        compile_regex(12)  # type: ignore[arg-type]


def test_where_no_time_bound_applies_only_linear_patterns_are_allowed() -> None:
    assert linear_regex(r"^[A-Z]{3}-\d+$").fullmatch("ABC-12")
    assert not linear_regex(r"^[A-Z]{3}$").fullmatch("abc")  # case-sensitive, like JSON Schema
    with pytest.raises(PatternError, match="only linear-time"):
        linear_regex(r"(\w)\1")  # a back-reference


@pytest.mark.parametrize(("kind", "pattern", "text", "matched"), [
    ("CONTAINS", "refund", "I want a REFUND now", True),
    ("CONTAINS", "refund", "I want a return", False),
    ("STARTS_WITH", "hello", "   Hello there", True),
    ("STARTS_WITH", "hello", "oh hello", False),
    ("EXACT", "yes", "  YES ", True),
    ("EXACT", "yes", "yes please", False),
    ("REGEX", r"\border\b", "where is my order?", True),
    ("REGEX", r"\border\b", "disorderly", False),
    ("regex", r"\d+", "call 911", True),  # the match type is read case-insensitively
])
def test_each_match_type_compares_as_documented(kind: str, pattern: str, text: str, matched: bool) -> None:
    assert TextMatcher.build(kind, pattern).matches(text) is matched


def test_an_unknown_match_type_names_the_known_ones() -> None:
    with pytest.raises(PatternError) as info:
        TextMatcher.build("FUZZY", "x")
    assert "FUZZY" in str(info.value) and "REGEX, CONTAINS, STARTS_WITH, EXACT, SEMANTIC" in str(info.value)


def test_semantic_examples_come_from_lines_or_json_and_never_match_by_text() -> None:
    lines = TextMatcher.build("SEMANTIC", "cancel my order\n\n  stop the delivery ")
    assert lines.examples == ("cancel my order", "stop the delivery") and lines.threshold is None
    assert not lines.matches("cancel my order")  # compared by embeddings in the intent step, never here
    spec = TextMatcher.build("SEMANTIC", '{"examples": ["track parcel", " "], "threshold": 0.75}')
    assert spec.examples == ("track parcel",) and spec.threshold == 0.75


@pytest.mark.parametrize(("pattern", "message"), [
    ('{"examples": "one"', "not valid JSON"),
    ('{"examples": "one"}', '"examples": a list of phrases'),
    ('{"examples": ["a"], "threshold": 2}', "from 0 to 1"),
    ('{"examples": ["a"], "threshold": "high"}', "from 0 to 1"),
])
def test_a_bad_semantic_pattern_says_what_is_wrong(pattern: str, message: str) -> None:
    with pytest.raises(PatternError, match=message):
        TextMatcher.build("SEMANTIC", pattern)
