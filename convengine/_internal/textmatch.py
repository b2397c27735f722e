"""Bounded text matching for patterns that come from rows and meet untrusted input.

Regexes compile with RE2 (linear time, no catastrophic backtracking). Patterns RE2 cannot
run (look-arounds, back-references) fall back to the ``regex`` module with a per-call
timeout, so a hostile pattern against a long message still finishes within a bound.
All matching is case-insensitive, like ConvEngine's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2
import regex

from convengine.catalog.errors import ConvEngineError, ErrorCode

DEFAULT_TIMEOUT_S = 0.1

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.case_sensitive = False
_RE2_OPTIONS.max_mem = 64 << 20
_RE2_EXACT = re2.Options()
_RE2_EXACT.log_errors = False
_RE2_EXACT.max_mem = 64 << 20


class RegexTimeoutError(ConvEngineError):
    """A fallback (non-RE2) pattern ran longer than its time bound."""

    default_code = ErrorCode.REGEX_TIMEOUT


class PatternError(ValueError):
    """A pattern that neither RE2 nor the fallback engine can compile."""


class SafeRegex:
    """A compiled, time-bounded, case-insensitive regular expression.

    Attributes:
        pattern: the source text.
        engine: ``"re2"`` or ``"regex"`` (the bounded fallback).
    """

    __slots__ = ("_compiled", "_timeout", "engine", "pattern")

    def __init__(self, pattern: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.pattern = pattern
        self._timeout = timeout_s
        try:
            self._compiled: Any = re2.compile(pattern, _RE2_OPTIONS)
            self.engine = "re2"
        except re2.error:
            try:
                self._compiled = regex.compile(pattern, regex.IGNORECASE | regex.V0)
            except regex.error as exc:
                raise PatternError(str(exc)) from None
            self.engine = "regex"

    def search(self, text: str) -> Any:
        """First match anywhere in ``text`` (a match object) or ``None``."""
        return self._run("search", text)

    def fullmatch(self, text: str) -> Any:
        """A match of the whole of ``text`` or ``None``."""
        return self._run("fullmatch", text)

    def _run(self, method: str, text: str) -> Any:
        if self.engine == "re2":
            return getattr(self._compiled, method)(text)
        try:
            return getattr(self._compiled, method)(text, timeout=self._timeout)
        except TimeoutError:
            raise RegexTimeoutError(
                f"pattern {self.pattern!r} took longer than {self._timeout * 1000:.0f} ms "
                f"on a {len(text)}-character input",
                details={"pattern": self.pattern},
            ) from None

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r}, engine={self.engine!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SafeRegex) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)


def compile_regex(pattern: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> SafeRegex:
    """Compile ``pattern``; raises :class:`PatternError` with the engine's reason."""
    if not isinstance(pattern, str):
        raise PatternError(f"pattern must be text, got {type(pattern).__name__}")
    return SafeRegex(pattern, timeout_s=timeout_s)


@lru_cache(maxsize=1024)
def cached_regex(pattern: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> SafeRegex:
    """:func:`compile_regex` for patterns that come from settings (compiled once per pattern)."""
    return compile_regex(pattern, timeout_s=timeout_s)


@lru_cache(maxsize=1024)
def linear_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear time, case-sensitive, like Java's and Python's defaults).

    For patterns that run with no time bound of their own (JSONPath ``=~`` and ``sub()``, JSON
    Schema ``pattern``). Raises :class:`PatternError` when RE2 cannot run it (look-arounds,
    back-references).
    """
    try:
        return re2.compile(pattern, _RE2_EXACT)
    except (re2.error, TypeError) as exc:
        raise PatternError(f"{pattern!r} needs a backtracking regex engine ({exc}); only linear-time (RE2) "
                           "patterns are allowed here") from None


MATCH_KINDS = ("REGEX", "CONTAINS", "STARTS_WITH", "EXACT", "SEMANTIC")
MAX_SEMANTIC_EXAMPLES = 200


@dataclass(frozen=True, slots=True)
class TextMatcher:
    """One ``rule_type`` + ``pattern`` pair of ce_policy / ce_intent_classifier.

    REGEX finds anywhere; CONTAINS, STARTS_WITH and EXACT compare case-insensitively
    (EXACT on the trimmed text). SEMANTIC holds example phrases (one per line, or a JSON object
    ``{"examples": [...], "threshold": 0.8}``) that the intent step compares by embedding
    similarity; it never matches by text alone.
    """

    kind: str
    pattern: str
    regex: SafeRegex | None = None
    examples: tuple[str, ...] = ()
    threshold: float | None = None

    @classmethod
    def build(cls, kind: str, pattern: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> TextMatcher:
        kind = (kind or "").strip().upper()
        if kind not in MATCH_KINDS:
            raise PatternError(f"unknown match type {kind!r}; expected one of {', '.join(MATCH_KINDS)}")
        if kind == "SEMANTIC":
            return cls(kind, pattern, None, *_semantic(pattern))
        compiled = compile_regex(pattern, timeout_s=timeout_s) if kind == "REGEX" else None
        return cls(kind, pattern, compiled)

    def matches(self, text: str) -> bool:
        if self.kind == "SEMANTIC":
            return False
        if self.regex is not None:
            return self.regex.search(text) is not None
        folded, needle = text.casefold(), self.pattern.casefold()
        if self.kind == "CONTAINS":
            return needle in folded
        if self.kind == "STARTS_WITH":
            return folded.lstrip().startswith(needle)
        return folded.strip() == needle.strip()


def _semantic(pattern: str) -> tuple[tuple[str, ...], float | None]:
    """Example phrases and an optional threshold from a SEMANTIC classifier's pattern."""
    text = (pattern or "").strip()
    threshold = None
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except ValueError as exc:
            raise PatternError(f"SEMANTIC pattern is not valid JSON: {exc}") from exc
        if not isinstance(spec, dict) or not isinstance(spec.get("examples"), list):
            raise PatternError('SEMANTIC JSON pattern needs "examples": a list of phrases')
        examples = [str(e).strip() for e in spec["examples"] if str(e).strip()]
        threshold = spec.get("threshold")
        if threshold is not None and not (isinstance(threshold, int | float) and 0 <= threshold <= 1):
            raise PatternError('SEMANTIC "threshold" must be a number from 0 to 1')
    else:
        examples = [line.strip() for line in text.splitlines() if line.strip()]
    if not examples:
        raise PatternError("SEMANTIC pattern has no example phrases (one per line)")
    if len(examples) > MAX_SEMANTIC_EXAMPLES:
        raise PatternError(f"SEMANTIC pattern has {len(examples)} examples; at most {MAX_SEMANTIC_EXAMPLES}")
    return tuple(examples), None if threshold is None else float(threshold)
