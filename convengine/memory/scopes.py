"""Memory scopes inside a turn: long-term properties merged into a new conversation's context, and
secret properties taken out of everything the turn keeps.

``step`` and ``conversation`` scopes are the engine's turn- and conversation-scoped state keys;
``longTerm`` and ``secret`` are declared by the pack (``conversation_memory.long_term`` /
``.secret``). Both run as internal step hooks, so no step had to change.
"""

from __future__ import annotations

from typing import Any

from convengine.catalog import names, stages
from convengine.catalog.state import CONVERSATION_KEYS, KEPT_PARAMS, NEW_CONVERSATION, TURN_INPUT, TURN_KEYS
from convengine.nodes.context import StepHook
from convengine.security.secrets import mask, secret_values


def merge_long_term(_step: str, turn: Any) -> None:
    """A new conversation starts with its user's long-term properties (the caller's seed wins)."""
    loaded = turn.ctx.long_term_loaded
    if not loaded or not turn.get(NEW_CONVERSATION):
        return
    context = turn.context
    merged = []
    for name, value in loaded.items():
        if name not in context:
            context[name] = value
            merged.append(name)
    turn.audit(stages.LONG_TERM_PROPERTIES_LOADED, {"properties": sorted(merged)})


def gather_long_term(_step: str, turn: Any) -> None:
    """Before the turn is persisted: a long-term property a rule or a task set as a param this turn (or
    the caller, where the pack allows it) joins the context, where the turn's commit saves it and where
    the ``properties`` namespace and the user's next conversation read it."""
    memory = turn.settings.conversation_memory
    if not memory.long_term:
        return
    params = turn.read_params()
    request = (turn.get(TURN_INPUT) or {}).get("params") or {}
    setters = {*(turn.get(KEPT_PARAMS) or ()), *(n for n in memory.long_term_from_caller if n in request)}
    for name in memory.long_term:
        if name in setters and name in params and turn.read_context().get(name) != params[name]:
            turn.context[name] = params[name]


def strip_secrets(_step: str, turn: Any) -> None:
    """Before the turn is persisted: drop secret properties and mask their values in every state key."""
    declared = list(turn.settings.conversation_memory.secret)
    if not declared:
        return
    secrets = secret_values(turn.ctx.secret_values, (turn.read_context(), turn.read_params()), declared)
    turn.ctx.secret_values = secrets
    for name in declared:
        if name in turn.read_context():
            turn.context.pop(name, None)
        if name in turn.read_params():
            turn.params.pop(name, None)
    if not secrets:
        return
    for key in (*CONVERSATION_KEYS, *TURN_KEYS):
        value = turn.get(key)
        masked = mask(value, secrets)
        if masked != value:
            turn.set(key, masked)


HOOKS: tuple[StepHook, ...] = (
    StepHook(after=merge_long_term, steps=(names.LOAD_OR_CREATE_CONVERSATION,)),
    StepHook(before=gather_long_term, steps=(names.PERSIST_CONVERSATION,)),
    StepHook(before=strip_secrets, steps=(names.PERSIST_CONVERSATION,)),
)
