"""Publish validation of chains, at load: every violation named with its chain and step.

A chain is refused when it has no enabled step, a step's type is unknown or its configuration wrong
(a required key missing, a bad expression, a jump to a step that does not exist, a delay or an HTTP
bound out of range, an ``${env:NAME}`` the operator does not let packs read), or a step id is
reserved (``end``) or repeated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from convengine.catalog import chains as vocab
from convengine.catalog.errors import Violation
from convengine.config.records import ChainRecord, ChainStepRecord
from convengine.config_loader.flow_checks import FlowFindings
from convengine.rules.expr import ExpressionError, compile_expression
from convengine.security.env_refs import DEFAULT_PACK_ENV_NAMES, refused_reason, refused_refs
from convengine.settings import HTTP_MAX_ATTEMPTS, HTTP_MAX_TIMEOUT_MS

CHAIN, STEP = "ce_chain", "ce_chain_step"
REQUIRED: dict[str, tuple[str, ...]] = {
    vocab.ASSISTANT: ("message",),
    vocab.AGENT: ("instructions",),
    vocab.WEBHOOK: ("url",),
    vocab.HUMAN: ("prompt",),
    vocab.DECIDE: ("branches",),
    vocab.NOTIFY: ("text",),
}


def validate_chains(v: FlowFindings, labels: dict[str, dict[Any, str]], *,
                    pack_env_names: Sequence[str] = DEFAULT_PACK_ENV_NAMES) -> None:
    """Check ce_chain / ce_chain_step rows, adding a violation per problem."""
    found: list[Violation] = []
    chains: dict[str, ChainRecord] = {c.chain_code: c for c in v.rows(CHAIN) if c.enabled}
    steps: dict[str, dict[str, ChainStepRecord]] = {code: {} for code in chains}
    for step in v.rows(STEP):
        if not step.enabled:
            continue
        where = f"chain {step.chain_code} step {step.step_id}"
        if step.chain_code not in chains:
            found.append(Violation(STEP, step.chain_step_id, "chain_code", f"{where}: no enabled ce_chain row"))
        elif step.step_id in steps[step.chain_code] or step.step_id == vocab.END or not step.step_id.strip():
            found.append(Violation(STEP, step.chain_step_id, "step_id",
                                   f"{where}: step ids are unique in their chain, not empty and not {vocab.END!r}"))
        else:
            steps[step.chain_code][step.step_id] = step
    for code, own in steps.items():
        if not own:
            found.append(Violation(CHAIN, code, None, f"chain {code}: no enabled step"))
        every = chains[code].every_s
        if every is not None and (isinstance(every, bool) or not isinstance(every, int)
                                  or not 1 <= every <= vocab.MAX_DELAY_S):
            found.append(Violation(CHAIN, code, "every_s", f"chain {code}: every_s must be a whole number of "
                                   f"seconds from 1 to {vocab.MAX_DELAY_S} (got {str(every)[:40]!r})"))
        for step in own.values():
            found += [Violation(STEP, step.chain_step_id, "config", f"chain {code} step {step.step_id}: {reason}")
                      for reason in step_problems(step, set(own), pack_env_names)]
    v.violations.extend(replace(x, row_id=labels.get(x.table, {}).get(x.row_id, x.row_id)) for x in found)


def step_problems(step: ChainStepRecord, step_ids: set[str], pack_env_names: Sequence[str]) -> list[str]:
    """What is wrong with one step's type and configuration (empty: nothing)."""
    if step.step_type not in vocab.STEP_TYPES:
        return [f"unknown step type {step.step_type!r}; expected one of {', '.join(sorted(vocab.STEP_TYPES))}"]
    config = step.config if step.config is not None else {}
    if not isinstance(config, dict):
        return ["config must be a JSON object"]
    problems = [f"a {step.step_type} step needs {key}" for key in REQUIRED.get(step.step_type, ())
                if config.get(key) in (None, "", [])]
    targets = [config.get("next"), config.get("on_error")]
    if step.step_type == vocab.DECIDE:
        problems += _branches(config, targets)
    if step.step_type == vocab.SCHEDULE:
        problems += _delay(config)
    if step.step_type == vocab.WEBHOOK:
        problems += _http_bounds(config)
    problems += [f"{path}: {refused_reason(name)}" for path, name in refused_refs(config, "config", pack_env_names)]
    problems += [f"jumps to {t!r}, which is no enabled step of the chain (nor {vocab.END!r})"
                 for t in targets if t is not None and (not isinstance(t, str) or t not in step_ids | {vocab.END})]
    return problems


def _branches(config: dict[str, Any], targets: list[object]) -> list[str]:
    branches = config.get("branches")
    if not isinstance(branches, list):
        return ["branches must be a list of {when, goto}"]
    problems = []
    for i, branch in enumerate(branches):
        if not isinstance(branch, dict) or not isinstance(branch.get("when"), str) or "goto" not in branch:
            problems.append(f"branches[{i}] must be {{when: <expression>, goto: <step>}}")
            continue
        targets.append(branch["goto"])
        try:
            compile_expression(branch["when"])
        except ExpressionError as exc:
            problems.append(f"branches[{i}].when {branch['when'][:80]!r} is not valid: {exc}")
    targets.append(config.get("otherwise"))
    return problems


def _delay(config: dict[str, Any]) -> list[str]:
    delay, at = config.get("delay_s"), config.get("at")
    if (delay is None) == (at is None):
        return ["a schedule step needs delay_s (seconds) or at (an ISO time template), not both"]
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float))
                              or not 0 <= delay <= vocab.MAX_DELAY_S):
        return [f"delay_s must be a number of seconds from 0 to {vocab.MAX_DELAY_S} (got {str(delay)[:40]!r})"]
    return []


def _http_bounds(config: dict[str, Any]) -> list[str]:
    problems = []
    for name, low, high in (("retries", 0, HTTP_MAX_ATTEMPTS - 1), ("timeout_ms", 1, HTTP_MAX_TIMEOUT_MS)):
        value = config.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
            problems.append(f"{name} must be a whole number from {low} to {high} (got {str(value)[:40]!r})")
    return problems
