"""dialogue_act and interaction_policy: what the user's message is (yes, no, edit, question, answer...)
and what it means for a pending action or slot, read from the audit trail of real turns."""

from __future__ import annotations

from typing import Any

from convengine.catalog import names
from convengine.llm import ScriptedLLM
from convengine.nodes.common import Step
from tests.helpers import engine_on, pack, payload_of, turn_events


async def act_of(engine: Any, text: str, cid: str | None = None, **kwargs: Any) -> dict[str, Any]:
    result = await engine.aprocess(text, cid, **kwargs)
    return payload_of(await turn_events(engine, result.conversation_id), "DIALOGUE_ACT_CLASSIFIED")


async def decision_of(engine: Any, cid: str) -> dict[str, Any]:
    return payload_of(await turn_events(engine, cid), "INTERACTION_POLICY_DECIDED")


# --- classification by regex --------------------------------------------------------------------


async def test_the_default_patterns_classify_short_replies_and_questions(sqlite_db_url: str) -> None:
    expected = {"yes": ("AFFIRM", 0.95), "  OK ": ("AFFIRM", 0.95), "nope": ("NEGATE", 0.95),
                "edit": ("EDIT", 0.95), "good morning": ("GREETING", 0.95),
                "what rate do you offer?": ("QUESTION", 0.70), "I need a loan": ("NEW_REQUEST", 0.70),
                "yes please do it now": ("NEW_REQUEST", 0.70)}  # patterns match the whole message only
    async with engine_on(sqlite_db_url, pack()) as engine:
        for text, (act, confidence) in expected.items():
            classified = await act_of(engine, text)
            assert (classified["dialogueAct"], classified["confidence"], classified["source"]) == \
                (act, confidence, "REGEX"), text


async def test_a_pack_replaces_an_acts_pattern_through_ce_config(sqlite_db_url: str) -> None:
    config = [{"config_type": "DialogueActStep", "config_key": "REGEX_AFFIRM", "config_value": r"^\s*(si|oui)\s*$"}]
    async with engine_on(sqlite_db_url, pack(ce_config=config)) as engine:
        assert (await act_of(engine, "oui"))["dialogueAct"] == "AFFIRM"
        assert (await act_of(engine, "yes"))["dialogueAct"] == "NEW_REQUEST"
        assert (await act_of(engine, "no"))["dialogueAct"] == "NEGATE"  # the other acts keep their defaults


def ask_when_told(turn: Any) -> None:
    """A host step standing for the engine asking the user something (a pending clarification)."""
    if turn.read_params().get("ask"):
        turn.context["pending_clarification"] = {"question": "Which account?", "reason": "HOST"}


async def test_a_short_reply_to_a_pending_question_is_an_answer(db_url: str) -> None:
    steps = [Step("ask", ask_when_told, before=names.DIALOGUE_ACT)]
    async with engine_on(db_url, pack(), steps=steps) as engine:
        first = await engine.aprocess("hello", input_params={"ask": True})
        answered = await act_of(engine, "the savings one", first.conversation_id)
        assert (answered["dialogueAct"], answered["confidence"]) == ("ANSWER", 0.75)
        rambling = await act_of(engine, "well " * 20 + "let me think about which account it might be",
                                first.conversation_id)
        assert rambling["dialogueAct"] == "NEW_REQUEST"  # too long to be a reply to the question
        plain = await act_of(engine, "the savings one")  # no question pending in a new conversation
        assert plain["dialogueAct"] == "NEW_REQUEST"


# --- the LLM leg ----------------------------------------------------------------------------------


async def test_the_llm_is_asked_only_below_the_threshold(sqlite_db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": lambda call: {"dialogueAct": "QUESTION", "confidence": 0.88}},
                      default={"intent": None, "confidence": 0})
    for threshold, asked in ((0.7, 0), (0.71, 1)):
        data = pack(settings={"flow": {"dialogue-act": {"resolute": "REGEX_THEN_LLM", "llm-threshold": threshold}}})
        async with engine_on(sqlite_db_url, data, llm=llm) as engine:
            before = llm.count("DIALOGUE_ACT")
            classified = await act_of(engine, "I need a loan")  # regex: NEW_REQUEST at 0.70
            assert llm.count("DIALOGUE_ACT") - before == asked
            assert classified["source"] == ("LLM" if asked else "REGEX")
            assert classified["regexAct"] == "NEW_REQUEST"


async def test_llm_only_without_a_model_keeps_the_regex_act_and_says_why(sqlite_db_url: str) -> None:
    data = pack(settings={"flow": {"dialogue-act": {"resolute": "LLM_ONLY"}}})
    async with engine_on(sqlite_db_url, data) as engine:
        result = await engine.aprocess("yes")
        events = await turn_events(engine, result.conversation_id)
    assert payload_of(events, "DIALOGUE_ACT_LLM_SKIPPED")["reason"] == "NO_LLM_CONFIGURED"
    classified = payload_of(events, "DIALOGUE_ACT_CLASSIFIED")
    assert (classified["dialogueAct"], classified["source"], classified["mode"]) == ("AFFIRM", "REGEX_FALLBACK",
                                                                                     "LLM_ONLY")


async def test_an_llm_reset_is_accepted_when_the_words_say_reset(sqlite_db_url: str) -> None:
    llm = ScriptedLLM({"DIALOGUE_ACT": [{"dialogueAct": "RESET", "confidence": 0.97}]},
                      default={"intent": None, "confidence": 0})
    data = pack(settings={"flow": {"dialogue-act": {"resolute": "LLM_ONLY"}}})
    async with engine_on(sqlite_db_url, data, llm=llm) as engine:
        classified = await act_of(engine, "start over")
    assert (classified["dialogueAct"], classified["source"], classified["llmAct"]) == ("RESET", "LLM", "RESET")


async def test_post_dialogue_act_rules_see_the_final_act(sqlite_db_url: str) -> None:
    rules = [{"phase": "POST_DIALOGUE_ACT", "intent_code": "ANY", "state_code": "ANY", "rule_type": "JSON_PATH",
              "match_pattern": "$[?(@.inputParams.dialogue_act == 'NEGATE')]", "action": "SET_INPUT_PARAM",
              "action_value": '{"said_no": true}'}]
    async with engine_on(sqlite_db_url, pack(ce_rule=rules)) as engine:
        no = await engine.aprocess("no")
        yes = await engine.aprocess("yes")
        assert (await engine.astate(no.conversation_id))["input_params"].get("said_no") is True
        assert "said_no" not in (await engine.astate(yes.conversation_id))["input_params"]


# --- interaction policy -------------------------------------------------------------------------

PENDING = [{"intent_code": "LOAN", "state_code": "START", "action_key": "SUBMIT", "bean_name": "loans",
            "method_names": "submit", "priority": 1}]


class Loans:
    def __init__(self) -> None:
        self.submitted = 0

    def submit(self, task: Any) -> None:
        self.submitted += 1


async def test_yes_and_no_answer_a_pending_action_without_reclassifying(db_url: str) -> None:
    loans = Loans()
    async with engine_on(db_url, pack(ce_pending_action=PENDING), tasks={"loans": loans}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        yes = await decision_of(engine, cid)
        assert (yes["policyDecision"], yes["skipIntentResolution"], yes["hasPendingAction"]) == \
            ("EXECUTE_PENDING_ACTION", True, True)
        assert "INTENT_RESOLVE_SKIPPED_POLICY" in [e.stage for e in await turn_events(engine, cid)]
        assert loans.submitted == 1
        await engine.aprocess("no", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "REJECT_PENDING_ACTION"
        await engine.aprocess("what does it cost?", cid)
        question = await decision_of(engine, cid)
        assert (question["policyDecision"], question["skipIntentResolution"]) == ("RECLASSIFY_INTENT", False)
        assert loans.submitted == 1


async def test_before_any_intent_a_yes_is_reclassified(sqlite_db_url: str) -> None:
    async with engine_on(sqlite_db_url, pack(ce_pending_action=PENDING), tasks={"loans": Loans()}) as engine:
        first = await engine.aprocess("yes")
        decided = await decision_of(engine, first.conversation_id)
    assert (decided["policyDecision"], decided["hasPendingAction"], decided["intent"]) == \
        ("RECLASSIFY_INTENT", False, "UNKNOWN")


async def test_the_pack_matrix_overrides_the_defaults(db_url: str) -> None:
    matrix = {"PENDING_ACTION:AFFIRM": "RECLASSIFY_INTENT", "pending_action:question": "execute_pending_action"}
    data = pack(ce_pending_action=PENDING,
                settings={"flow": {"interaction-policy": {"matrix": matrix}}})
    loans = Loans()
    async with engine_on(db_url, data, tasks={"loans": loans}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "RECLASSIFY_INTENT"
        assert loans.submitted == 0
        await engine.aprocess("shall we?", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "EXECUTE_PENDING_ACTION"  # keys in any case
        assert loans.submitted == 1


async def test_the_affirm_and_negate_defaults_can_be_turned_off(db_url: str) -> None:
    data = pack(ce_pending_action=PENDING, settings={"flow": {"interaction-policy": {
        "matrix": {}, "execute-pending-on-affirm": False, "reject-pending-on-negate": True}}})
    loans = Loans()
    async with engine_on(db_url, data, tasks={"loans": loans}) as engine:
        cid = (await engine.aprocess("loan")).conversation_id
        await engine.aprocess("yes", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "RECLASSIFY_INTENT"
        await engine.aprocess("no", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "REJECT_PENDING_ACTION"
    assert loans.submitted == 0


def wait_for_slot(turn: Any) -> None:
    """A host step standing for a form that waits for one slot."""
    if turn.read_params().get("slot"):
        turn.context["pending_slot"] = turn.read_params()["slot"]


async def test_a_reply_fills_a_pending_slot_unless_it_is_a_new_request(db_url: str) -> None:
    steps = [Step("slot", wait_for_slot, before=names.INTERACTION_POLICY)]
    async with engine_on(db_url, pack(), steps=steps) as engine:
        cid = (await engine.aprocess("loan", input_params={"slot": "amount"})).conversation_id
        await engine.aprocess("how about 500?", cid)
        filled = await decision_of(engine, cid)
        assert (filled["policyDecision"], filled["hasPendingSlot"]) == ("FILL_PENDING_SLOT", True)
        await engine.aprocess("I also want a credit card", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "RECLASSIFY_INTENT"
        await engine.aprocess("hello", cid)
        assert (await decision_of(engine, cid))["policyDecision"] == "RECLASSIFY_INTENT"  # greetings never fill
