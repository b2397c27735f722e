"""The rules engine: pure, no I/O (match types, actions, passes)."""

from convengine.rules.actions import BUILTIN_ACTIONS, ActionEnv, parse_input_params
from convengine.rules.engine import BUILTIN_MATCH_TYPES, PhaseRun, RuleRegistry, bucket_order
from convengine.rules.facts import FactsInput, build_facts
from convengine.rules.jsonpath import JsonPathMatcher, compile_jsonpath
from convengine.rules.model import PhaseResult, RuleSession

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
