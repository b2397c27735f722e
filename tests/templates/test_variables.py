"""The variables templates see, through Engine on both backends: every alias names the same value,
a bare name is looked up in session fields, then input params, then the context, explicit
variables win over a param of the same name, and the history, context and clock variables."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime
from typing import Any

from tests.helpers import engine_on, pack

ALIASES = {
    "user_input": ["userInput", "user_text", "userText", "input_text", "inputText", "input", "user_message",
                   "userMessage"],
    "resolved_user_input": ["resolvedUserInput", "resolved_input", "resolvedInput", "effective_input",
                            "effectiveInput", "effective_user_input", "effectiveUserInput", "final_user_input",
                            "finalUserInput"],
    "conversation_id": ["conversationId"],
    "input_params": ["inputParams", "safeInputParams", "rawInputParams"],
    "conversation_history": ["conversationHistory", "history"],
    "context_json": ["contextJson"],
    "current_year": ["currentYear"],
    "current_date": ["currentDate"],
    "container_data": ["containerData"],
}
SEP = " ¦ "


def response(text: str) -> list[dict[str, Any]]:
    return [{"intent_code": "LOAN", "state_code": "START", "exact_text": text, "priority": 1}]


async def test_every_alias_names_the_same_value(db_url: str) -> None:
    names = [name for canonical, aliases in ALIASES.items() for name in (canonical, *aliases)]
    text = SEP.join(f"{{{{ {name} }}}}" for name in names)
    async with engine_on(db_url, pack(ce_response=response(text))) as engine:
        first = await engine.aprocess("hello")
        result = await engine.aprocess("a loan please", first.conversation_id, input_params={"tier": "gold"})
    shown = dict(zip(names, result.text.split(SEP), strict=True))
    for canonical, aliases in ALIASES.items():
        assert {shown[a] for a in aliases} == {shown[canonical]}, canonical
    assert shown["user_input"] == shown["resolved_user_input"] == "a loan please"  # no rewrite: the message
    assert shown["conversation_id"] == result.conversation_id
    assert json.loads(shown["input_params"])["tier"] == "gold"
    assert json.loads(shown["conversation_history"]) == [{"user": "hello", "assistant": "Hello there"}]
    assert shown["current_year"] == str(datetime.now().year)
    assert date.fromisoformat(shown["current_date"]).year == datetime.now().year
    assert json.loads(shown["container_data"]) == {}


async def test_bare_names_take_session_fields_then_params_then_context(db_url: str) -> None:
    text = ("intent={{intent}} state={{state}} size={{size}} crust={{crust}} input={{user_input}} "
            "ctx={{context.size}} param={{inputParams.size}} session={{session.intent}}/{{session.state}}")
    async with engine_on(db_url, pack(ce_response=response(text))) as engine:
        cid = str(uuid.uuid4())
        await engine.aseed(cid, context={"size": "from-context", "crust": "thin", "intent": "FROM_CONTEXT"})
        params = {"size": "from-params", "intent": "FROM_PARAMS", "user_input": "forged", "state": "FORGED"}
        result = await engine.aprocess("a loan", cid, input_params=params)
    assert result.text == ("intent=LOAN state=START size=from-params crust=thin input=a loan ctx=from-context "
                           "param=from-params session=LOAN/START")


async def test_history_is_newest_first_and_the_context_prints_as_json(db_url: str) -> None:
    text = ("{% for t in conversation_history %}[{{ t.user }}>{{ t.assistant }}]{% endfor %} "
            "pending=[{{ pending_clarification }}] query=[{{ standalone_query }}] ctx={{ context_json }}")
    async with engine_on(db_url, pack(ce_response=response(text))) as engine:
        cid = str(uuid.uuid4())
        await engine.aseed(cid, context={"order": {"id": 7, "lines": ["pizza"]}})
        await engine.aprocess("hello", cid)
        await engine.aprocess("hi", cid)
        result = await engine.aprocess("a loan", cid)
    history, rest = result.text.split(" pending=", 1)
    assert history == "[hi>Hello there][hello>Hello there]"
    assert rest.startswith("[] query=[] ctx=")
    assert json.loads(rest.split("ctx=", 1)[1])["order"] == {"id": 7, "lines": ["pizza"]}


class LazyTurn:
    """A TemplateSession that records which parts of the turn were read."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.ctx = None
        self.conversation_id, self.intent, self.state = "c-1", "LOAN", "START"
        self.user_text, self.standalone_query, self.resolved_input = "hi", None, "hi"

    def get(self, key: str, default: Any = None) -> Any:
        self.read.append(f"get:{key}")
        return default

    def read_params(self) -> dict[str, Any]:
        self.read.append("params")
        return {"size": "P"}

    def read_context(self) -> dict[str, Any]:
        self.read.append("context")
        return {"size": "C", "crust": "thin"}

    def facts_input(self) -> Any:
        from convengine.rules import FactsInput

        self.read.append("facts")
        return FactsInput(self.conversation_id, self.intent, self.state, {"size": "C", "crust": "thin"},
                          {"size": "P"}, user_text=self.user_text)

    def schema_json(self) -> dict[str, Any]:
        self.read.append("schema")
        return {"crust": "thin"}


def test_only_the_variables_a_template_names_are_computed() -> None:
    from convengine.templates.render import referenced_names
    from convengine.templates.variables import template_variables

    turn = LazyTurn()
    names = referenced_names("{{ userInput }} {{ intent }}")
    assert template_variables(turn, names=names) == {"userInput": "hi", "intent": "LOAN"}
    assert turn.read == []  # neither the history, the context nor the params were read
    variables = template_variables(turn, {"intent": "EXTRA"}, names=["intent", "size", "crust", "nowhere"])
    assert variables == {"intent": "EXTRA", "size": "P", "crust": "thin"}  # a call site's extras win
    assert "get:recent_turns" not in turn.read
