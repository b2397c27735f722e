"""Rule passes: scope buckets, every match fires, re-pass on intent/state change.

Pure: the engine reads the session, calls actions and emits audit stages; it does no I/O
of its own (SET_TASK calls the user's callables).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convengine._internal.textmatch import RegexTimeoutError
from convengine.catalog import params as pk
from convengine.catalog import stages
from convengine.catalog.errors import ConvEngineError, RuleError
from convengine.catalog.state import changed_params
from convengine.catalog.vocab import ANY
from convengine.config.records import RuleRecord
from convengine.rules.actions import BUILTIN_ACTIONS, ActionEnv, ActionHandler, TaskRunner
from convengine.rules.model import Emit, PhaseResult, RuleSession

MatchType = Callable[[RuleRecord, RuleSession], bool]


def match_exact(rule: RuleRecord, session: RuleSession) -> bool:
    pattern = rule.match_pattern.strip()
    return pattern.upper() == ANY or pattern.casefold() == session.user_text.strip().casefold()


def match_regex(rule: RuleRecord, session: RuleSession) -> bool:
    return rule.matcher is not None and rule.matcher.search(session.user_text) is not None


def match_json_path(rule: RuleRecord, session: RuleSession) -> bool:
    return rule.matcher is not None and rule.matcher.matches(session.facts(rule.matcher.source))


def match_context_json_path(rule: RuleRecord, session: RuleSession) -> bool:
    if rule.matcher is None:
        return False
    return any(v is not None for v in rule.matcher.find(dict(session.read_context())))


BUILTIN_MATCH_TYPES: Mapping[str, MatchType] = {
    "EXACT": match_exact,
    "REGEX": match_regex,
    "JSON_PATH": match_json_path,
    "CONTEXT_JSON_PATH": match_context_json_path,
}


@dataclass(frozen=True, slots=True)
class RuleRegistry:
    """Match types and actions by name: ConvEngine's built-ins plus the user's own."""

    match_types: Mapping[str, MatchType] = field(default_factory=lambda: dict(BUILTIN_MATCH_TYPES))
    actions: Mapping[str, ActionHandler] = field(default_factory=lambda: dict(BUILTIN_ACTIONS))

    @classmethod
    def with_custom(cls, match_types: Mapping[str, MatchType] | None = None,
                    actions: Mapping[str, ActionHandler] | None = None) -> RuleRegistry:
        return cls({**BUILTIN_MATCH_TYPES, **{k.upper(): v for k, v in (match_types or {}).items()}},
                   {**BUILTIN_ACTIONS, **{k.upper(): v for k, v in (actions or {}).items()}})


def bucket_order(rules: Sequence[RuleRecord], intent: str, state: str) -> list[RuleRecord]:
    """Candidates for (intent, state): exact+exact, intent+ANY, ANY+state, ANY+ANY; each by priority, id."""
    buckets: tuple[list[RuleRecord], ...] = ([], [], [], [])
    for rule in rules:
        ri, rs = rule.intent_code, rule.state_code
        if ri not in (intent, ANY) or rs not in (state, ANY):
            continue
        buckets[(ri == ANY) * 2 + (rs == ANY)].append(rule)
    ordered: list[RuleRecord] = []
    for bucket in buckets:
        ordered.extend(sorted(bucket, key=lambda r: (r.priority, r.rule_id)))
    return ordered


@dataclass(slots=True)
class PhaseRun:
    """One invocation of a phase's rules for a session."""

    phase: str
    rules: Sequence[RuleRecord]
    session: RuleSession
    registry: RuleRegistry
    source: str
    emit: Emit
    run_task: TaskRunner | None = None
    max_passes: int = 5
    origin: str = "RULES_STEP"

    async def run(self) -> PhaseResult:
        result = PhaseResult(self.phase)
        self._stamp()
        env = ActionEnv(self.run_task, self.emit)
        while result.passes < self.max_passes:
            result.passes += 1
            before = (self.session.intent, self.session.state)
            candidates = bucket_order(self.rules, *before)
            if not candidates:
                if result.passes == 1:
                    self._audit(stages.RULE_NO_MATCH, {"phase": self.phase, "reason": "NO_CANDIDATES", **self._where()})
                break
            for rule in candidates:
                if await self._evaluate(rule, env):
                    result.matched.append(rule.rule_id)
            if (self.session.intent, self.session.state) == before:
                break
            result.changed = True
        else:  # every pass moved intent or state: the rules may be ping-ponging
            self._audit(stages.RULE_PASS_LIMIT_REACHED, {"phase": self.phase, "passes": result.passes,
                                                    "maxPasses": self.max_passes, **self._where()})
        self._audit(stages.RULE_PHASE_RUN, {"phase": self.phase, "passes": result.passes, "matched": result.matched,
                                       "changed": result.changed, **self._where()})
        return result

    def _stamp(self) -> None:
        params = self.session.params
        params[pk.RULE_PHASE] = self.phase
        params[pk.RULE_EXECUTION_SOURCE] = self.source
        params[pk.RULE_EXECUTION_ORIGIN] = self.origin

    def _where(self) -> dict[str, Any]:
        return {"intent": self.session.intent, "state": self.session.state}

    def _audit(self, stage: str, payload: dict[str, Any]) -> None:
        self.emit(stages.by_source(stage, self.source), payload)

    async def _evaluate(self, rule: RuleRecord, env: ActionEnv) -> bool:
        described = {"ruleId": rule.rule_id, "phase": self.phase, "ruleType": rule.rule_type,
                     "matchPattern": rule.match_pattern, "action": rule.action, "priority": rule.priority}
        matcher = self.registry.match_types.get(rule.rule_type)
        if matcher is None:
            self._audit(stages.RULE_NO_MATCH, {**described, "reason": "TYPE_RESOLVER_MISSING", **self._where()})
            return False
        try:
            matched = matcher(rule, self.session)
        except RegexTimeoutError as exc:
            self._audit(stages.RULE_NO_MATCH, {**described, "reason": "PATTERN_TIMEOUT", "error": exc.message})
            return False
        if not matched:
            self._audit(stages.RULE_NO_MATCH, {**described, "reason": "TYPE_CONDITION_NOT_MET", **self._where()})
            return False
        self._audit(stages.RULE_MATCH, {**described, **self._where(), "context": dict(self.session.read_context())})
        await self._apply(rule, env, described)
        return True

    async def _apply(self, rule: RuleRecord, env: ActionEnv, described: dict[str, Any]) -> None:
        handler = self.registry.actions.get(rule.action)
        if handler is None:
            self._audit(stages.RULE_NO_MATCH, {**described, "reason": "ACTION_RESOLVER_MISSING"})
            return
        before = None if rule.action in BUILTIN_ACTIONS else dict(self.session.params)
        try:
            outcome = handler(rule, self.session, env)
            payload = await outcome if inspect.isawaitable(outcome) else outcome
            if before is not None:
                self._keep_changes(before)
        except ConvEngineError:
            raise
        except Exception as exc:
            raise RuleError(f"ce_rule[{rule.rule_id}] action {rule.action} failed: {exc}",
                            details={"ruleId": rule.rule_id}) from exc
        self.emit(rule.action, payload)
        self._audit(stages.RULE_APPLIED, {**described, "actionValue": _parsed(rule.action_value), **self._where()})


    def _keep_changes(self, before: Mapping[str, Any]) -> None:
        """Params a host's own action set persist, as SET_INPUT_PARAM's do (engine keys never)."""
        changed = changed_params(before, self.session.params)
        if changed:
            self.session.keep_params(changed)


def _parsed(value: str | None) -> Any:
    if value and value.strip()[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
