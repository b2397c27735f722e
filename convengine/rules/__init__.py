"""The rules engine: pure, no I/O (match types, actions, passes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from convengine._internal.lazy import lazy_names

if TYPE_CHECKING:  # the names below, for type checkers and the import-graph checks; at run time each
    # loads on first use, so importing one submodule does not run the others (see convengine/_internal/lazy.py)
    from convengine.rules.actions import BUILTIN_ACTIONS, ActionEnv
    from convengine.rules.engine import BUILTIN_MATCH_TYPES, PhaseRun, RuleRegistry, bucket_order
    from convengine.rules.facts import FactsInput, build_facts
    from convengine.rules.jsonpath import JsonPathMatcher, compile_jsonpath
    from convengine.rules.model import PhaseResult, RuleSession
    from convengine.rules.params import parse_input_params

__all__ = [
    "BUILTIN_ACTIONS",
    "BUILTIN_MATCH_TYPES",
    "ActionEnv",
    "FactsInput",
    "JsonPathMatcher",
    "PhaseResult",
    "PhaseRun",
    "RuleRegistry",
    "RuleSession",
    "bucket_order",
    "build_facts",
    "compile_jsonpath",
    "parse_input_params",
]

__getattr__, __dir__ = lazy_names(__name__, {
    "ActionEnv": "actions",
    "BUILTIN_ACTIONS": "actions",
    "BUILTIN_MATCH_TYPES": "engine",
    "FactsInput": "facts",
    "JsonPathMatcher": "jsonpath",
    "PhaseResult": "model",
    "PhaseRun": "engine",
    "RuleRegistry": "engine",
    "RuleSession": "model",
    "bucket_order": "engine",
    "build_facts": "facts",
    "compile_jsonpath": "jsonpath",
    "parse_input_params": "params",
})
