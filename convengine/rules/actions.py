"""Rule actions. Each returns the payload of the audit stage named after it."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError, ErrorCode, RuleError
from convengine.catalog.vocab import DIALOGUE_ACTS
from convengine.config.records import RuleRecord
from convengine.rules.handoff import hand_off
from convengine.rules.jsonpath import compile_jsonpath
from convengine.rules.model import RuleSession
from convengine.rules.params import parse_input_params

ActionHandler = Callable[[RuleRecord, RuleSession, "ActionEnv"], Awaitable[dict[str, Any]] | dict[str, Any]]


TaskRunner = Callable[[str, str, RuleSession, RuleRecord], Awaitable[Any]]
"""Runs the task ``bean:method`` for a rule (supplied by the node layer)."""


class ActionEnv:
    """What actions may use besides the session: SET_TASK's runner and the emitter."""

    __slots__ = ("emit", "run_task")

    def __init__(self, run_task: TaskRunner | None, emit: Callable[[str, dict[str, Any]], None]) -> None:
        self.run_task = run_task
        self.emit = emit


def _value(rule: RuleRecord) -> str:
    return (rule.action_value or "").strip()


def set_state(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    before = session.state
    session.set_state(_value(rule).upper(), cause=f"rule {rule.rule_id}")
    return {"ruleId": rule.rule_id, "fromState": before, "toState": session.state}


def set_intent(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    before = session.intent
    session.set_intent(_value(rule).upper(), cause=f"rule {rule.rule_id}")
    return {"ruleId": rule.rule_id, "fromIntent": before, "toIntent": session.intent}


def set_dialogue_act(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    raw = _value(rule)
    if not raw:
        raise RuleError(f"ce_rule[{rule.rule_id}]: SET_DIALOGUE_ACT needs an act", code=ErrorCode.INVALID_RULE_ACTION)
    spec: dict[str, Any] = json.loads(raw) if raw.startswith("{") else {"dialogueAct": raw}
    act = str(spec.get("dialogueAct") or spec.get("dialogue_act") or "").strip().upper()
    if act not in DIALOGUE_ACTS:
        raise RuleError(f"ce_rule[{rule.rule_id}]: unknown dialogue act {act!r}", code=ErrorCode.INVALID_RULE_ACTION)
    confidence = spec.get("confidence")
    source = spec.get("source") or spec.get("dialogue_act_source") or "RULE"
    query = spec.get("standaloneQuery") or spec.get("standalone_query")
    session.set_dialogue_act(act, confidence=float(confidence) if confidence is not None else None,
                             source=str(source), standalone_query=query)
    return {"ruleId": rule.rule_id, "dialogueAct": act, "confidence": confidence, "source": source}


_GROUP_REF = re.compile(r"\$(\d+)|\$\{([A-Za-z_]\w*)\}")


def regex_groups(rule: RuleRecord, session: RuleSession) -> Any:
    """The match of a REGEX rule's pattern on this turn's text (its capture groups), or None."""
    if rule.rule_type != "REGEX" or rule.matcher is None or not hasattr(rule.matcher, "search"):
        return None
    return rule.matcher.search(session.user_text)


class GroupMatch(Protocol):
    """A REGEX rule's match (RE2 or the bounded fallback): its capture groups by number or name."""

    def group(self, index: int | str, /) -> str | None: ...


def _group(match: GroupMatch, ref: re.Match[str]) -> str | None:
    number, name = ref.group(1), ref.group(2)
    try:
        return match.group(int(number)) if number is not None else match.group(name)
    except (IndexError, KeyError, re.error, ValueError):
        return None


def substitute_groups(value: object, match: GroupMatch | None) -> Any:
    """``$1`` / ``${name}`` in a SET_INPUT_PARAM value -> the REGEX rule's capture groups.

    A string that is exactly one reference takes the group's value (``None`` when the group
    did not take part in the match); references inside a longer string are replaced by the
    group's text (empty when it did not take part). Nested objects and lists are substituted too.
    """
    if match is None:
        return value
    if isinstance(value, dict):
        return {k: substitute_groups(v, match) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_groups(v, match) for v in value]
    if not isinstance(value, str) or "$" not in value:
        return value
    whole = _GROUP_REF.fullmatch(value)
    if whole:
        return _group(match, whole)
    return _GROUP_REF.sub(lambda ref: _group(match, ref) or "", value)


def set_input_param(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    raw = _value(rule)
    if not raw:
        raise RuleError(f"ce_rule[{rule.rule_id}]: SET_INPUT_PARAM needs a value", code=ErrorCode.INVALID_RULE_ACTION)
    values = substitute_groups(parse_input_params(raw), regex_groups(rule, session))
    session.keep_params(values)
    return {"ruleId": rule.rule_id, "params": values}


def parse_names(raw: str) -> list[str]:
    """CLEAR_* values: ``name``, ``a, b`` or a JSON list of names."""
    text = raw.strip()
    if text.startswith("["):
        return [str(item).strip() for item in json.loads(text) if str(item).strip()]
    return [part.strip() for part in text.split(",") if part.strip()]


def clear_input_param(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    """Forget stored input params (``cancel_reason``), so a later flow asks for them again."""
    names = parse_names(_value(rule))
    params = session.params
    cleared = [name for name in names if params.pop(name, _MISSING) is not _MISSING]
    return {"ruleId": rule.rule_id, "params": names, "cleared": cleared}


def clear_context(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    """Forget top-level context keys (extracted schema fields...), so a second order asks again."""
    names = parse_names(_value(rule))
    context = session.context
    cleared = [name for name in names if context.pop(name, _MISSING) is not _MISSING]
    return {"ruleId": rule.rule_id, "keys": names, "cleared": cleared}


_MISSING = object()


def set_json(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    raw = _value(rule)
    name, sep, path = raw.partition(":")
    if not sep:
        name, path = raw, raw
    name = name.strip() or "llm_json"
    path = path.strip() or "$"
    values = compile_jsonpath(path).find(session.facts(path))
    if not values:  # ConvEngine leaves the target as it was when the path finds nothing
        return {"ruleId": rule.rule_id, "param": name, "path": path, "matched": False}
    session.keep_params({name: values[0]})
    return {"ruleId": rule.rule_id, "param": name, "path": path, "matched": True, "value": values[0]}


def _getter(default: str, produce: Callable[[RuleSession], Any]) -> ActionHandler:
    def handler(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
        name = _value(rule) or default
        session.keep_params({name: produce(session)})
        return {"ruleId": rule.rule_id, "param": name}

    return handler


async def set_task(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    bean, _, methods = _value(rule).partition(":")
    bean = bean.strip()
    names = [m.strip() for m in (methods or bean).split(",") if m.strip()]
    results: list[dict[str, Any]] = []
    for method in names:
        results.append(await _run_task(rule, session, env, bean, method))
    return {"ruleId": rule.rule_id, "taskBean": bean, "taskMethods": names, "results": results}


async def _run_task(rule: RuleRecord, session: RuleSession, env: ActionEnv, bean: str, method: str) -> dict[str, Any]:
    """Call one task; like ConvEngine, a failing task is recorded and the turn goes on."""
    try:
        if env.run_task is None:
            raise ConvEngineError(f"no task registered for {bean}:{method}", code=ErrorCode.TASK_NOT_FOUND)
        await env.run_task(bean, method, session, rule)
        return {"method": method, "status": "OK"}
    except Exception as exc:  # noqa: BLE001 - SET_TASK failures never break the turn
        env.emit(stages.SET_TASK_FAILED, {"ruleId": rule.rule_id, "taskBean": bean, "taskMethod": method,
                                     "errorType": type(exc).__name__, "errorMessage": str(exc)})
        return {"method": method, "status": "FAILED", "error": str(exc)}


def handoff(rule: RuleRecord, session: RuleSession, env: ActionEnv) -> dict[str, Any]:
    """Hand the conversation to a human (see convengine.rules.handoff)."""
    return hand_off(session, rule.rule_id, _value(rule))


BUILTIN_ACTIONS: Mapping[str, ActionHandler] = {
    "SET_STATE": set_state,
    "SET_INTENT": set_intent,
    "SET_DIALOGUE_ACT": set_dialogue_act,
    "SET_INPUT_PARAM": set_input_param,
    "SET_JSON": set_json,
    "GET_CONTEXT": _getter("context", lambda s: dict(s.read_context())),
    "GET_SCHEMA_JSON": _getter("schema_json", lambda s: s.schema_json()),
    "GET_SESSION": _getter("session", lambda s: s.session_dict()),
    "SET_TASK": set_task,
    "CLEAR_INPUT_PARAM": clear_input_param,
    "CLEAR_CONTEXT": clear_context,
    "HANDOFF": handoff,
}
