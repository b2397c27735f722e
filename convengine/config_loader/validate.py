"""Load-time validation of control-plane records: every violation, named, at once.

Checks ConvEngine's scope integrity and what ConvEngine only finds at
turn time: regexes compile, JSON schemas are schemas, JSON_PATH rules parse, actions,
phases, match types and tool groups are known, states referenced by SET_STATE and
ce_state_graph exist, db-tool rows point at tools, interaction contracts are JSON.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

import jsonschema
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError

from convengine._internal.jsonschemas import checked_validator
from convengine._internal.textmatch import PatternError, TextMatcher, compile_regex
from convengine.catalog import ce_config
from convengine.catalog.ce_config import SETTINGS_CONFIG_TYPE
from convengine.catalog.errors import Violation
from convengine.catalog.vocab import (
    ANY,
    CLASSIFIER_TYPES,
    CLEAR_CONTEXT,
    CLEAR_INPUT_PARAM,
    DIALOGUE_ACTS,
    INTENT_COLLISION,
    INTERACTION_MODES,
    LLM_POLICY,
    POLICY_TYPES,
    RESPONSE_FORMATS,
    RESPONSE_TYPES,
    RULE_ACTIONS,
    RULE_TYPES,
    SET_STATE,
    TEMPLATE_FORMATS,
    TOOL_GROUPS,
    UNKNOWN,
)
from convengine.config.records import (
    ClassifierRecord,
    ConfigRow,
    DbToolRecord,
    IntentRecord,
    OutputSchemaRecord,
    PolicyRecord,
    PromptTemplateRecord,
    Record,
    ResponseRecord,
    RuleRecord,
    StateGraphRecord,
    ToolRecord,
    VerboseRecord,
)
from convengine.config_loader.template_checks import check_templates
from convengine.rules.jsonpath import compile_jsonpath
from convengine.rules.params import parse_input_params

R = TypeVar("R", bound=Record)
Matched = ClassifierRecord | PolicyRecord | RuleRecord | VerboseRecord
"""Records that carry a compiled matcher."""

SCOPED_TABLES = (
    "ce_rule",
    "ce_pending_action",
    "ce_prompt_template",
    "ce_response",
    "ce_container_config",
    "ce_output_schema",
    "ce_mcp_tool",
    "ce_mcp_planner",
    "ce_verbose",
    "ce_intent_classifier",
    "ce_memory",
)
# Blank scope codes are allowed here and read as wildcards (ConvEngine's code does so).
_BLANK_OK = {("ce_rule", "intent_code"), ("ce_rule", "state_code"), ("ce_response", "intent_code"),
             ("ce_prompt_template", "intent_code"), ("ce_prompt_template", "state_code")}

# Every (TYPE, KEY) of a ce_config row that convengine reads (besides EngineSettings rows): the ce_config table.
READ_CONFIG_KEYS: frozenset[tuple[str, str]] = frozenset(ce_config.BY_IDENT)


@dataclass(slots=True)
class Validation:
    """What validation found, and the records with their compiled matchers attached."""

    tables: dict[str, list[Record]]
    rule_types: frozenset[str] = frozenset(RULE_TYPES)
    rule_actions: frozenset[str] = frozenset(RULE_ACTIONS)
    regex_timeout_s: float = 0.1
    violations: list[Violation] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    known_states: frozenset[str] = frozenset()
    reachable_states: frozenset[str] = frozenset()
    handled_states: frozenset[str] = frozenset()
    all_intents: frozenset[str] = frozenset()

    def bad(self, record: Record | str, row_id: object, column: str | None, reason: str) -> None:
        table = record if isinstance(record, str) else record.TABLE
        self.violations.append(Violation(table, row_id, column, reason))

    def rows(self, table: str) -> list[Record]:
        return self.tables.get(table, [])

    def records(self, kind: type[R]) -> list[R]:
        """The rows of ``kind``'s table (each table holds records of its own type only)."""
        return [r for r in self.tables.get(kind.TABLE, []) if isinstance(r, kind)]


def validate(v: Validation, labels: dict[str, dict[Any, str]]) -> None:
    """Run every check, filling ``v.violations``/``v.warnings`` and compiling matchers."""
    v.all_intents = frozenset({i.intent_code for i in v.records(IntentRecord)} | {ANY, UNKNOWN, INTENT_COLLISION})
    v.reachable_states = _reachable_states(v)
    v.handled_states = _handled_states(v)
    v.known_states = v.reachable_states | v.handled_states
    for check in (_scopes, _verbose, _policies, _classifiers, _rules, _schemas, _responses,
                  _templates, _tools, _db_tools, _state_graph, _config, check_templates):
        check(v)
    _relabel(v, labels)


def _relabel(v: Validation, labels: dict[str, dict[Any, str]]) -> None:
    """Name rows the way their source does (pack rows without an id by position)."""
    v.violations = [
        replace(x, row_id=labels.get(x.table, {}).get(x.row_id, x.row_id)) for x in v.violations
    ]


def _reachable_states(v: Validation) -> frozenset[str]:
    """States something can put a conversation in (ConvEngine's 'allowed states', extended).

    The engine's own states, every ce_rule scope state and SET_STATE target (as ConvEngine
    counts them) and every state a classifier sets.
    """
    states = {ANY, UNKNOWN, INTENT_COLLISION}
    for rule in v.rows("ce_rule"):
        assert isinstance(rule, RuleRecord)
        if not rule.enabled:
            continue
        states.add(rule.state_code)
        if rule.action == SET_STATE and rule.action_value:
            states.add(rule.action_value.strip().upper())
    for clf in v.records(ClassifierRecord):
        if clf.enabled:
            states.add(clf.state_code)
    return frozenset(states)


def _handled_states(v: Validation) -> frozenset[str]:
    """States some enabled row is scoped on (so a turn in that state has something to do)."""
    states = {UNKNOWN, INTENT_COLLISION}
    for table in SCOPED_TABLES:
        for rec in v.rows(table):
            state = getattr(rec, "state_code", None)
            if getattr(rec, "enabled", True) and state and state != ANY:
                states.add(state)
    return frozenset(states)


def _scopes(v: Validation) -> None:
    intents = {i.intent_code for i in v.records(IntentRecord) if i.enabled} | {ANY, UNKNOWN}
    for table in SCOPED_TABLES:
        for rec in v.rows(table):
            if getattr(rec, "enabled", True):
                _scope_of(v, rec, intents)


def _scope_of(v: Validation, rec: Record, intents: set[str]) -> None:
    intent, state = getattr(rec, "intent_code", None), getattr(rec, "state_code", None)
    for column, value in (("intent_code", intent), ("state_code", state)):
        if not value and (rec.TABLE, column) not in _BLANK_OK:
            v.bad(rec, rec.row_id, column, "must not be blank (use ANY for a wildcard)")
    if intent and intent not in intents:
        if rec.TABLE == "ce_rule" and intent not in v.all_intents:
            v.bad(rec, rec.row_id, "intent_code", _unknown_intent(intent, v))
            return
        v.warnings.append(f"{rec.TABLE}[{rec.row_id}]: intent {intent!r} is not an enabled ce_intent; row is inactive")
        return
    if state and state not in v.reachable_states:
        v.bad(rec, rec.row_id, "state_code", _unreachable(state, v))


def _unknown_intent(intent: str, v: Validation) -> str:
    known = ", ".join(sorted(v.all_intents))
    return f"unknown intent {intent!r}: no ce_intent row has it, so the rule can never run (known: {known})"


def _unreachable(state: str, v: Validation) -> str:
    known = ", ".join(sorted(v.reachable_states))
    return (f"unknown state {state!r}: nothing can reach it (states come from ce_rule state_code, "
            f"SET_STATE values and ce_intent_classifier state_code; known: {known})")


def _unhandled(state: str, v: Validation) -> str:
    known = ", ".join(sorted(v.handled_states - {UNKNOWN, INTENT_COLLISION}))
    return (f"unknown state {state!r}: no enabled row is scoped on it, so a conversation moved there "
            f"would have no response (states with rows: {known})")


def _verbose(v: Validation) -> None:
    for rec in v.rows("ce_verbose"):
        assert isinstance(rec, VerboseRecord)
        if rec.step_match not in ("EXACT", "REGEX", "JSON_PATH"):
            v.bad(rec, rec.row_id, "step_match", f"must be EXACT, REGEX or JSON_PATH, got {rec.step_match!r}")
        for column in ("step_value", "determinant"):
            if not (getattr(rec, column) or "").strip():
                v.bad(rec, rec.row_id, column, "must not be blank")
        if rec.step_match == "REGEX" and rec.step_value:
            _attach(v, rec, "step_value", partial(compile_regex, rec.step_value, timeout_s=v.regex_timeout_s))
        elif rec.step_match == "JSON_PATH" and rec.step_value:
            _attach(v, rec, "step_value", partial(compile_jsonpath, rec.step_value))


def _attach(v: Validation, rec: Matched, column: str, make: Callable[[], Any]) -> None:
    """Compile a matcher for ``rec`` and store it on the record, or report why it failed."""
    try:
        matcher = make()
    except (PatternError, JsonPathLexerError, JsonPathParserError, ValueError, Exception) as exc:  # noqa: BLE001
        v.bad(rec, rec.row_id, column, f"does not compile: {exc}")
        return
    rows = v.tables[rec.TABLE]
    rows[rows.index(rec)] = replace(rec, matcher=matcher)


def _text_matcher(v: Validation, rec: PolicyRecord | ClassifierRecord, kinds: Iterable[str]) -> None:
    if rec.rule_type not in kinds:
        v.bad(rec, rec.row_id, "rule_type", f"must be one of {', '.join(kinds)}, got {rec.rule_type!r}")
        return
    _attach(v, rec, "pattern", lambda: TextMatcher.build(rec.rule_type, rec.pattern, timeout_s=v.regex_timeout_s))


def _policies(v: Validation) -> None:
    for rec in list(v.rows("ce_policy")):
        assert isinstance(rec, PolicyRecord)
        if rec.rule_type == LLM_POLICY:  # judged by the POLICY call site: the pattern describes the policy
            if not (rec.pattern or "").strip():
                v.bad(rec, rec.row_id, "pattern", "an LLM policy needs a pattern describing what it forbids")
            continue
        _text_matcher(v, rec, (*POLICY_TYPES, LLM_POLICY))


def _classifiers(v: Validation) -> None:
    for rec in list(v.rows("ce_intent_classifier")):
        assert isinstance(rec, ClassifierRecord)
        _text_matcher(v, rec, CLASSIFIER_TYPES)


def _rules(v: Validation) -> None:
    for rec in list(v.rows("ce_rule")):
        assert isinstance(rec, RuleRecord)
        if rec.phase.startswith("?"):
            v.bad(rec, rec.row_id, "phase", f"unknown phase {rec.phase[1:]!r}")
        if rec.rule_type not in v.rule_types:
            v.bad(rec, rec.row_id, "rule_type", f"unknown rule type {rec.rule_type!r}; known: {', '.join(sorted(v.rule_types))}")
        if rec.action not in v.rule_actions:
            v.bad(rec, rec.row_id, "action", f"unknown action {rec.action!r}; known: {', '.join(sorted(v.rule_actions))}")
        _rule_action_value(v, rec)
        if rec.rule_type == "REGEX":
            _attach(v, rec, "match_pattern", partial(compile_regex, rec.match_pattern, timeout_s=v.regex_timeout_s))
        elif rec.rule_type in ("JSON_PATH", "CONTEXT_JSON_PATH"):
            _attach(v, rec, "match_pattern", partial(compile_jsonpath, rec.match_pattern))


def _rule_action_value(v: Validation, rec: RuleRecord) -> None:
    value = (rec.action_value or "").strip()
    if rec.action in _NEEDS_VALUE and not value:
        v.bad(rec, rec.row_id, "action_value", f"{rec.action} needs an action_value")
        return
    if rec.action == "SET_STATE" and value.upper() not in v.handled_states:
        v.bad(rec, rec.row_id, "action_value", _unhandled(value, v))
    if rec.action == "SET_INTENT" and value.upper() not in v.all_intents:
        v.bad(rec, rec.row_id, "action_value", _unknown_intent(value.upper(), v))
    if rec.action == "SET_DIALOGUE_ACT" and not value.startswith("{") and value.upper() not in DIALOGUE_ACTS:
        v.bad(rec, rec.row_id, "action_value", f"unknown dialogue act {value!r}; known: {', '.join(DIALOGUE_ACTS)}")
    if rec.action == "SET_INPUT_PARAM" and value[:1] in "[{":
        try:  # the parser every turn uses, so a value that loads is one the rule can apply
            parse_input_params(value)
        except json.JSONDecodeError as exc:
            v.bad(rec, rec.row_id, "action_value", f"is not valid JSON: {exc.msg}")
        except (ValueError, TypeError, AttributeError) as exc:
            v.bad(rec, rec.row_id, "action_value", f"is not a SET_INPUT_PARAM value: {exc}")
    elif rec.action in ("SET_DIALOGUE_ACT", CLEAR_INPUT_PARAM, CLEAR_CONTEXT) and value[:1] in "[{":
        try:
            json.loads(value)
        except json.JSONDecodeError as exc:
            v.bad(rec, rec.row_id, "action_value", f"is not valid JSON: {exc.msg}")


_NEEDS_VALUE = ("SET_STATE", "SET_INTENT", "SET_DIALOGUE_ACT", "SET_INPUT_PARAM", "SET_TASK",
                CLEAR_INPUT_PARAM, CLEAR_CONTEXT)


def _check_json_schema(v: Validation, rec: Record, column: str, schema: object) -> None:
    if schema is None:
        return
    if isinstance(schema, str) and schema.lstrip().startswith("<"):
        _check_xsd(v, rec, column, schema)
        return
    if not isinstance(schema, dict):
        v.bad(rec, rec.row_id, column, f"must be a JSON schema object, got {type(schema).__name__}")
        return
    try:
        checked_validator(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        v.bad(rec, rec.row_id, column, f"is not a valid JSON schema at {where}: {exc.message}")


def _check_xsd(v: Validation, rec: Record, column: str, text: str) -> None:
    try:
        ET.fromstring(text)
    except ET.ParseError as exc:
        v.bad(rec, rec.row_id, column, f"is not well-formed XML: {exc}")


def _schemas(v: Validation) -> None:
    for rec in v.records(OutputSchemaRecord):
        _check_json_schema(v, rec, "json_schema", rec.json_schema)


def _responses(v: Validation) -> None:
    for rec in v.records(ResponseRecord):
        if rec.response_type not in RESPONSE_TYPES:
            v.bad(rec, rec.row_id, "response_type", f"must be EXACT or DERIVED, got {rec.response_type!r}")
        if rec.output_format not in RESPONSE_FORMATS:
            v.bad(rec, rec.row_id, "output_format", f"must be TEXT or JSON, got {rec.output_format!r}")
        if rec.response_type == "EXACT" and rec.exact_text is None:
            v.bad(rec, rec.row_id, "exact_text", "an EXACT response needs exact_text")
        _check_json_schema(v, rec, "json_schema", rec.json_schema)


def _templates(v: Validation) -> None:
    for rec in v.records(PromptTemplateRecord):
        if rec.output_format not in TEMPLATE_FORMATS:  # ConvEngine never selects such a row: skip it, load the rest
            v.warnings.append(f"ce_prompt_template[{rec.row_id}]: output_format {rec.output_format!r} is not one of "
                              f"{', '.join(TEMPLATE_FORMATS)}; no call site selects this row, so it is ignored")
        if rec.interaction_mode and rec.interaction_mode not in INTERACTION_MODES:
            v.warnings.append(f"ce_prompt_template[{rec.row_id}]: unknown interaction_mode {rec.interaction_mode!r} is treated as absent")
        if rec.interaction_contract:
            _contract(v, rec, rec.interaction_contract)


def _contract(v: Validation, rec: Record, text: str) -> None:
    try:
        contract = json.loads(text)
    except json.JSONDecodeError as exc:
        v.bad(rec, rec.row_id, "interaction_contract", f"is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})")
        return
    if not isinstance(contract, dict):
        v.bad(rec, rec.row_id, "interaction_contract", "must be a JSON object like {\"allows\": [...], \"expects\": [...]}")
        return
    for key in ("allows", "expects"):
        if key in contract and not isinstance(contract[key], list):
            v.bad(rec, rec.row_id, "interaction_contract", f"{key!r} must be a list")


def _tools(v: Validation) -> None:
    for rec in v.records(ToolRecord):
        if rec.group not in TOOL_GROUPS:
            v.bad(rec, rec.row_id, "tool_group", f"unknown tool group {rec.tool_group!r}; known: {', '.join(TOOL_GROUPS)} (and their aliases)")
        if not (rec.tool_code or "").strip():
            v.bad(rec, rec.row_id, "tool_code", "must not be blank")
    codes: dict[str, Any] = {}
    for tool in v.records(ToolRecord):
        code = tool.tool_code.lower()
        if code in codes:
            v.bad(tool, tool.row_id, "tool_code", f"duplicate tool_code {tool.tool_code!r} (also tool {codes[code]})")
        codes[code] = tool.row_id


def _db_tools(v: Validation) -> None:
    tools = {t.row_id: t for t in v.records(ToolRecord)}
    for rec in v.records(DbToolRecord):
        tool = tools.get(rec.tool_id)
        if tool is None:
            v.bad(rec, rec.row_id, "tool_id", f"no ce_mcp_tool with tool_id {rec.tool_id}")
        elif tool.group != "DB":
            v.bad(rec, rec.row_id, "tool_id", f"tool {tool.tool_code!r} is in group {tool.group}, not DB")
        if not (rec.sql_template or "").strip():
            v.bad(rec, rec.row_id, "sql_template", "must not be blank")
        if rec.allowed_identifiers is not None and not isinstance(rec.allowed_identifiers, dict):
            v.bad(rec, rec.row_id, "allowed_identifiers", "must map an identifier name to a list of allowed values")
        if rec.max_rows is not None and rec.max_rows < 1:
            v.bad(rec, rec.row_id, "max_rows", "must be at least 1")


def _state_graph(v: Validation) -> None:
    intents = {i.intent_code for i in v.records(IntentRecord) if i.enabled} | {ANY}
    for rec in v.records(StateGraphRecord):
        if not rec.enabled:
            continue
        if rec.intent_code not in intents:
            v.warnings.append(f"ce_state_graph[{rec.row_id}]: intent {rec.intent_code!r} is not an enabled ce_intent")
        for column in ("from_state", "to_state"):
            state = getattr(rec, column)
            if not state:
                v.bad(rec, rec.row_id, column, "must not be blank")
            elif state not in v.known_states:
                v.bad(rec, rec.row_id, column, _unreachable(state, v))


def _config(v: Validation) -> None:
    for rec in v.records(ConfigRow):
        if not rec.enabled:
            continue
        key = (rec.config_type.upper(), rec.config_key.upper())
        if key[0] != SETTINGS_CONFIG_TYPE.upper() and key not in READ_CONFIG_KEYS:
            v.warnings.append(f"ce_config[{rec.row_id}]: {rec.config_type}.{rec.config_key} is not read by convengine; "
                              "the row does nothing")
        spec = ce_config.BY_IDENT.get(key)
        if spec is None or rec.config_value in (None, ""):
            continue
        if spec.kind == "regex":
            _attach_regex_check(v, rec, rec.config_value)
        try:
            spec.parse(rec.config_value)
        except ValueError:
            v.bad(rec, rec.row_id, "config_value",
                  f"{rec.config_type}.{rec.config_key} must be {spec.type_text}, got {rec.config_value!r}")


def _attach_regex_check(v: Validation, rec: Record, pattern: str) -> None:
    try:
        compile_regex(pattern, timeout_s=v.regex_timeout_s)
    except PatternError as exc:
        v.bad(rec, rec.row_id, "config_value", f"regex does not compile: {exc}")
