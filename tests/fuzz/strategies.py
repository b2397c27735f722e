"""Hypothesis strategies shared by the fuzz tests: JSON values, user text, rows of ce_* tables."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

INTENTS = ["GREETING", "LOAN"]
STATES = ["IDLE", "START", "DONE"]
FIELDS = ["customerId", "amount", "flag", "name", "mcp", "a_b"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
json_objects = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), json_values, max_size=6)

WORDS = ["loan", "hello", "cancel", "42", "ünïcode", "a.b", "(", "*", "", " ", "ANY", "{{x}}", "$.x", "\\d"]
scopes = st.sampled_from(["ANY", *INTENTS]), st.sampled_from(["ANY", *STATES])
user_text = st.one_of(st.text(max_size=60), st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join))

REGEX_PARTS = ["loan", "\\d+", "(a|b)*", "^", "$", ".*", "[a-z]+", "\\b", "(?=x)", "+", "?", "ü", "\\s*"]
BROKEN_REGEX_PARTS = ["(", ")", "[", "\\1", "{2,3}", "(?i)"]
JSONPATHS = ["$[?(@.inputParams.flag == true)]", "$[?(@.schemaComplete == false)]", "$.state", "$..mcp",
             "$[?(@.intent == 'LOAN' & @.state == 'START')]", "$.context.customerId", "$[?(@.amount > 3)]"]


def regex_patterns(hostile: bool) -> st.SearchStrategy[str]:
    parts = REGEX_PARTS + (BROKEN_REGEX_PARTS if hostile else [])
    joined = st.lists(st.sampled_from(parts), min_size=1, max_size=6).map("".join)
    return st.one_of(st.text(max_size=12), joined) if hostile else joined


def jsonpath_patterns(hostile: bool) -> st.SearchStrategy[str]:
    good = st.one_of(
        st.builds(lambda f, v: f"$[?(@.{f} == '{v}')]", st.sampled_from(FIELDS), st.sampled_from(["x", "1", "on"])),
        st.builds(lambda f: f"$.context.{f}", st.sampled_from(FIELDS)), st.sampled_from(JSONPATHS))
    return st.one_of(good, st.text(max_size=16), st.just("$[")) if hostile else good


ACTIONS = {
    "SET_STATE": (st.sampled_from(STATES), st.sampled_from(["nowhere", ""])),
    "SET_INTENT": (st.sampled_from(INTENTS), st.sampled_from(["ANY", "NOPE"])),
    "SET_INPUT_PARAM": (st.sampled_from(["flag:on", "amount:5", '{"k": [1, 2]}', "bare", "flag:true"]),
                        st.sampled_from(["", "{broken"])),
    "SET_DIALOGUE_ACT": (st.sampled_from(["AFFIRM", "NEGATE", "EDIT", '{"dialogueAct": "RESET"}']),
                         st.sampled_from(["DANCE", ""])),
    "SET_JSON": (st.sampled_from(["out:$.state", "$.context", "m:$..mcp"]), st.just("x:$[")),
    "GET_CONTEXT": (st.sampled_from(["", "ctx"]), st.just("")),
    "EXPLODE": (st.just("x"), st.just("x")),
}
SAFE_ACTIONS = sorted(a for a in ACTIONS if a != "EXPLODE")
PHASES = ["PRE_RESPONSE_RESOLUTION", "POST_DIALOGUE_ACT", "POST_INTENT"]


@st.composite
def rule_rows(draw: st.DrawFn, rule_id: int, hostile: bool = False) -> dict[str, Any]:
    """One ce_rule row; ``hostile`` rows may be invalid in any column (validation must name them)."""
    kinds = ["EXACT", "REGEX", "JSON_PATH", "CONTEXT_JSON_PATH"] + (["FUZZY"] if hostile else [])
    kind = draw(st.sampled_from(kinds))
    pattern = {"EXACT": user_text, "FUZZY": user_text, "REGEX": regex_patterns(hostile)}.get(
        kind, jsonpath_patterns(hostile))
    action = draw(st.sampled_from(sorted(ACTIONS) if hostile else SAFE_ACTIONS))
    good, bad = ACTIONS[action]
    return {"rule_id": rule_id, "phase": draw(st.sampled_from(PHASES + (["NOT_A_PHASE"] if hostile else []))),
            "intent_code": draw(scopes[0]), "state_code": draw(scopes[1]), "rule_type": kind,
            "match_pattern": draw(pattern), "action": action,
            "action_value": draw(st.one_of(good, bad) if hostile else good),
            "priority": draw(st.integers(0, 5)), "enabled": draw(st.booleans() | st.just(True))}


def _rules(n: int, hostile: st.SearchStrategy[bool]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.tuples(*[hostile.flatmap(lambda h, i=i: rule_rows(i + 1, h)) for i in range(n)]).map(list)


# mostly valid rule sets (so the engine runs), some with hostile rows (so validation is exercised)
rule_lists = st.integers(0, 7).flatmap(lambda n: _rules(n, st.sampled_from([False] * 7 + [True])))
