"""Every audit stage, node name, ce_config key and state key is spelled in its catalogue only.

The scans read convengine/ as source (AST): an audit stage, a node name at a step site, a ce_config
key or a state key written as a bare string outside its catalogue fails here, naming file and line,
so a literal left behind by a merge or a new emit site is found at once. The catalogues' own checks
(each stage documented in the generated reference, the state keys matching the TypedDicts) and the
one truthiness parser's behaviour at load follow.
"""

from __future__ import annotations

import ast
import copy
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from convengine.catalog import booleans, ce_config, names, stages, state
from convengine.catalog import params as param_keys
from convengine.catalog.errors import ConfigValidationError
from convengine.config_loader import validate_pack

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "convengine"

# Where a catalogued string legitimately appears with another meaning.
STAGE_HOMONYMS = {
    "convengine/catalog/errors.py",  # ErrorCode.RESPONSE_MAPPING_NOT_FOUND: an error code spelled like the stage
    "convengine/db/generations.py",  # USER_INPUT: a ce_conversation_history entry type
}
NODE_NAMES = frozenset(v for k, v in vars(names).items() if k.isupper() and isinstance(v, str))
CONFIG_KEY_NAMES = frozenset(k.key for k in ce_config.CONFIG_KEYS)
STATE_KEYS = frozenset((*state.CONVERSATION_KEYS, *state.TURN_KEYS))


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _docstrings(tree: ast.Module) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found |= {id(s.value) for s in node.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)}
    return found


def _strings(tree: ast.Module) -> Iterator[ast.Constant]:
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def test_audit_stages_are_written_only_in_the_catalogue() -> None:
    bare = [f"{rel}:{n.lineno} {n.value}" for rel, tree in _sources()
            if rel not in (*STAGE_HOMONYMS, "convengine/catalog/stages.py")
            for n in _strings(tree) if n.value in stages.STAGES]
    assert bare == [], "use convengine.catalog.stages instead of:\n" + "\n".join(bare)


def test_every_emit_site_names_its_stage_from_the_catalogue() -> None:
    """A literal (or f-string) stage at .audit()/.emit() is a new stage nobody catalogued."""
    bare = []
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in ("audit", "emit", "_audit") and node.args:
                first = node.args[0]
                if isinstance(first, ast.JoinedStr) or (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    bare.append(f"{rel}:{node.lineno} {ast.unparse(first)}")
    assert bare == [], "add the stage to convengine/catalog/stages.py and use it:\n" + "\n".join(bare)


def test_skip_audits_name_their_stage_from_the_catalogue() -> None:
    """A step's skip function returns (stage, payload): the stage comes from the catalogue."""
    bare = []
    for rel, tree in _sources():
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and "skip" in fn.name:
                for ret in ast.walk(fn):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                        bare += [f"{rel}:{ret.lineno} {e.value}" for e in ret.value.elts
                                 if isinstance(e, ast.Constant) and isinstance(e.value, str)
                                 and e.value.isupper() and e.value.endswith(("_SKIPPED", "_AVAILABLE"))]
    assert bare == [], "\n".join(bare)


def _step_site(node: ast.AST) -> bool:
    """``x["step"]``, ``x.get("step")``, ``x.step``, ``x.current_step``: where a node name is compared."""
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "step"
    if isinstance(node, ast.Call) and _call_name(node) == "get" and node.args:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value == "step"
    return isinstance(node, ast.Attribute) and node.attr in ("step", "current_step")


def _a_list_of_steps(elts: list[ast.expr]) -> bool:
    """A literal list of node names (``["pipeline_end_guard"]``); one plain word such as ``["memory"]`` is
    an OpenAPI tag or a setting section that shares the step's name, not a step."""
    values = [e.value for e in elts if isinstance(e, ast.Constant)]
    return bool(elts) and len(values) == len(elts) and all(v in NODE_NAMES for v in values) and (
        len(values) > 1 or "_" in str(values[0]))


def test_node_names_come_from_graph_names() -> None:
    bare = []
    for rel, tree in _sources():
        if rel == "convengine/catalog/names.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(_step_site(s) for s in (node.left, *node.comparators)):
                bare += [f"{rel}:{node.lineno} {c.value}" for c in (node.left, *node.comparators)
                         if isinstance(c, ast.Constant) and c.value in NODE_NAMES]
            elif isinstance(node, ast.Call) and _call_name(node) in ("Step", "route_to", "following", "enter_step"):
                bare += [f"{rel}:{node.lineno} {a.value}" for a in node.args[:1]
                         if isinstance(a, ast.Constant) and a.value in NODE_NAMES]
            elif isinstance(node, (ast.List, ast.Tuple)) and _a_list_of_steps(node.elts):
                bare.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert bare == [], "use convengine.catalog.names instead of:\n" + "\n".join(bare)


def test_ce_config_keys_are_read_through_the_table() -> None:
    bare = []
    for rel, tree in _sources():
        if rel == "convengine/catalog/ce_config.py":
            continue
        bare += [f"{rel}:{n.lineno} {n.value}" for n in _strings(tree) if n.value in CONFIG_KEY_NAMES]
        if rel != "convengine/config/snapshot.py":
            bare += [f"{rel}:{n.lineno} .{_call_name(n)}()" for n in ast.walk(tree) if isinstance(n, ast.Call)
                     and _call_name(n) in ("component", "component_float", "component_int", "component_bool")]
    assert bare == [], "read ce_config with snapshot.config_value(ce_config.KEY):\n" + "\n".join(bare)


STATE_TYPES = frozenset({"EngineState", "ConversationState", "TurnState", "EngineInput"})
STATE_HOLDERS = frozenset({"state", "final", "values", "graph_input", "_state", "_update"})
"""What the code calls a mapping of graph-state keys: the graph's input, a node's incoming state and
its update, the turn's final state, a checkpoint's values (a snapshot's ``.values``)."""
GRAPH_CALLS = frozenset({"invoke", "ainvoke", "stream", "astream", "update_state", "aupdate_state"})


def _state_names(tree: ast.Module) -> set[str]:
    """Names annotated with a state TypedDict anywhere in the module (parameters and assignments)."""
    found = set(STATE_HOLDERS)
    for node in ast.walk(tree):
        target, annotation = None, None
        if isinstance(node, ast.arg):
            target, annotation = node.arg, node.annotation
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, (ast.Name, ast.Attribute)):
            target, annotation = ast.unparse(node.target).split(".")[-1], node.annotation
        if target and annotation is not None and STATE_TYPES & {n.id for n in ast.walk(annotation)
                                                               if isinstance(n, ast.Name)}:
            found.add(target)
    return found


def _holds_state(expr: ast.expr, holders: set[str]) -> bool:
    """``final``, ``self._update``, ``snap.values or {}``, ``engine.state(cid)``, ``cast(EngineState, x)``."""
    if isinstance(expr, ast.BoolOp):
        return _holds_state(expr.values[0], holders)
    if isinstance(expr, ast.Name):
        return expr.id in holders
    if isinstance(expr, ast.Attribute):
        return expr.attr in holders
    if isinstance(expr, ast.Call):
        if _call_name(expr) in ("state", "astate", "checkpointed_state"):
            return True
        return _call_name(expr) == "cast" and bool(expr.args) and ast.unparse(expr.args[0]) in STATE_TYPES
    return False


def _bare_state_keys(tree: ast.Module) -> Iterator[tuple[int, str]]:
    holders = _state_names(tree)

    def key(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and node.value in STATE_KEYS else None

    for node in ast.walk(tree):
        found: list[str | None] = []
        if isinstance(node, ast.Subscript) and _holds_state(node.value, holders):
            found = [key(node.slice)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            method, receiver = node.func.attr, node.func.value
            if method in ("get", "pop", "setdefault") and _holds_state(receiver, holders) or method == "set" or (
                    method == "get" and ast.unparse(receiver).split(".")[-1] in ("turn", "session")):
                found = [key(node.args[0])]  # a Turn (a node's or a rule's view of the state) reads and writes by key
            elif method in GRAPH_CALLS:  # the graph's input, or the values of update_state(config, values)
                values = node.args[-1] if "update" in method else node.args[0]
                found = [key(k) for k in values.keys] if isinstance(values, ast.Dict) else []
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if any(_holds_state(c, holders) for c in node.comparators):
                found = [key(node.left)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_holds_state(t, holders) for t in targets):
                found = [key(k) for k in node.value.keys]
        yield from ((node.lineno, k) for k in found if k)


def test_state_keys_are_read_and_written_by_name() -> None:
    """``final.get("status")``, ``state["intent"]``, ``turn.set("context", ...)``, a graph input ``{"turn_input":
    ...}`` bypass the catalogue: ``final.get(keys.STATUS)`` (``from convengine.catalog import state as keys``)."""
    bare = [f"{rel}:{line} {key}" for rel, tree in _sources() if rel != "convengine/catalog/state.py"
            for line, key in _bare_state_keys(tree)]
    assert bare == [], "use the key names of convengine.catalog.state instead of:\n" + "\n".join(bare)


def test_the_state_key_check_sees_every_spelling() -> None:
    """The scan above flags each way a bare key reaches the state, and leaves other mappings alone."""
    source = '''
def node(state: EngineState, final, scope, row):
    state["intent"]; final.get("context"); self._update["params"]; (snap.values or {}).get("turn")
    engine.state(cid)["flow"]; "persisted" in final; turn.set("reply", 1); turn.get("status"); session.set("state", 1)
    graph_input = {"turn_input": {}}; graph.aupdate_state(config, {"context": {}})
    cast(EngineState, x)["payload"]; mine: TurnState = {}; mine["user_text"]
    scope["state"]; row.get("conversation_id"); turn["params"]; final.get(keys.INTENT); {"intent": 1}
'''
    found = sorted(key for _, key in _bare_state_keys(ast.parse(source)))
    assert found == sorted(["intent", "context", "params", "turn", "flow", "persisted", "reply", "status", "state",
                            "turn_input", "context", "payload", "user_text"])


def test_engine_params_are_read_by_name() -> None:
    """``params["routing_decision"]`` / ``params.get("policy_decision")``: use convengine.catalog.params."""
    known = frozenset(v for k, v in vars(param_keys).items() if k.isupper() and isinstance(v, str))
    bare = []
    for rel, tree in _sources():
        if rel == "convengine/catalog/params.py":
            continue
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and "params" in ast.unparse(node.value):
                key = node.slice
            elif (isinstance(node, ast.Call) and _call_name(node) in ("get", "pop", "setdefault") and node.args
                  and isinstance(node.func, ast.Attribute) and "params" in ast.unparse(node.func.value)):
                key = node.args[0]
            if isinstance(key, ast.Constant) and key.value in known:
                bare.append(f"{rel}:{node.lineno} {key.value}")
    assert bare == [], "\n".join(bare)


# --- the catalogues themselves ----------------------------------------------------------


def test_each_stage_constant_is_its_own_stored_string_and_documented() -> None:
    constants = {k: v for k, v in vars(stages).items() if k.isupper() and isinstance(v, str) and v in stages.STAGES}
    assert {k for k, v in constants.items() if k != v} == set()
    assert set(constants.values()) == set(stages.STAGES)
    assert [s for s, (area, doc) in stages.STAGES.items() if not area or not doc.strip()] == []
    page = (ROOT / "docs/reference/audit-stages.md").read_text(encoding="utf-8")
    assert [s for s in stages.STAGES if f"| `{s}` |" not in page] == []


def test_dynamic_stages_keep_their_stored_shape() -> None:
    assert stages.by_source(stages.RULE_MATCH, "RulesStep") == "RULE_MATCH (RulesStep)"
    assert stages.intent_resolved_by("AGENT") == stages.INTENT_RESOLVED_BY_AGENT


def test_state_keys_match_the_typed_dicts() -> None:
    hints = typing.get_type_hints(state.EngineState)
    named = {v for k, v in vars(state).items() if k.isupper() and isinstance(v, str) and v in hints}
    assert named == set(hints) == STATE_KEYS
    assert set(state.CONVERSATION_KEYS).isdisjoint(state.TURN_KEYS)
    assert set(state.turn_defaults()) == set(state.TURN_KEYS) - {state.TURN_INPUT}


def test_every_ce_config_key_is_typed_documented_and_unique() -> None:
    assert len(ce_config.BY_IDENT) == len(ce_config.CONFIG_KEYS)
    assert [k.ident for k in ce_config.CONFIG_KEYS if not k.doc] == []
    for key in ce_config.CONFIG_KEYS:
        if key.default is not None and key.kind in ("number", "integer", "boolean"):
            assert key.parse(str(key.default)) == key.default, key.ident
    page = (ROOT / "docs/reference/settings.md").read_text(encoding="utf-8")
    assert [k.ident for k in ce_config.CONFIG_KEYS if f"| `{k.component}` | `{k.key}` |" not in page] == []


# --- one truthiness parser, seen at load --------------------------------------------------

PACK = {
    "ce_intent": [{"intent_code": "LOAN", "description": "loans"}],
    "ce_response": [{"response_id": 20, "intent_code": "LOAN", "state_code": "UNKNOWN", "response_type": "EXACT",
                     "exact_text": "Tell me more"}],
}


def _with_config(key: str, value: str, **row: object) -> dict[str, object]:
    pack = copy.deepcopy(PACK)
    pack["ce_config"] = [{"config_id": 7, "config_type": "IntentResolutionStep", "config_key": key,
                          "config_value": value, **row}]
    return pack


@pytest.mark.parametrize("spelling", [*booleans.TRUE_SPELLINGS, *booleans.FALSE_SPELLINGS, " OFF ", "Yes"])
def test_every_boolean_spelling_is_accepted_in_ce_config_and_in_boolean_columns(spelling: str) -> None:
    validate_pack(_with_config("STICKY_INTENT", spelling, enabled=spelling))


@pytest.mark.parametrize("spelling", ["maybe", "yess", "2", ""])
def test_a_bad_boolean_in_ce_config_is_an_error_naming_the_key(spelling: str) -> None:
    if spelling == "":
        validate_pack(_with_config("STICKY_INTENT", spelling))  # empty: the key's default
        return
    with pytest.raises(ConfigValidationError) as info:
        validate_pack(_with_config("STICKY_INTENT", spelling))
    text = str(info.value)
    assert "ce_config[7].config_value: IntentResolutionStep.STICKY_INTENT must be a boolean" in text
    assert repr(spelling) in text


def test_a_bad_boolean_column_names_the_column() -> None:
    with pytest.raises(ConfigValidationError, match=r"ce_config\[7\]\.enabled: expected true or false"):
        validate_pack(_with_config("STICKY_INTENT", "true", enabled="perhaps"))


def test_truthy_reads_only_true_spellings() -> None:
    assert [booleans.truthy(v) for v in (True, 1, 1.0, "ON", " t ", "1")] == [True] * 6
    assert [booleans.truthy(v) for v in (False, 0, 2, None, "", "off", "yes please", [], {})] == [False] * 9
