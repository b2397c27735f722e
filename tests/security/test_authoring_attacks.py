"""Untrusted text meets the authoring features: Thymeleaf blocks, regex capture groups and JSONPath
null checks. A user's message is data (never template syntax), and a pack's loops stay inside the
template budget."""

from __future__ import annotations

import pytest

from convengine.catalog.errors import ErrorCode, PromptRenderError
from convengine.templates.render import TemplateLimits, render_text
from tests.helpers import engine_on, pack

pytestmark = pytest.mark.asyncio

HOSTILE = '[# th:each="x : ${range(100000)}"]{{ 7*7 }}[/] #{7*7} [[${7*7}]]'


async def test_a_message_with_template_syntax_is_shown_as_written(db_url: str) -> None:
    rules = [{"intent_code": "LOAN", "state_code": "START", "rule_type": "REGEX", "match_pattern": r"note: (?P<note>.+)$",
              "action": "SET_INPUT_PARAM", "action_value": '{"note": "${note}"}'}]
    responses = [{"intent_code": "LOAN", "state_code": "START", "priority": 1,
                  "exact_text": "You said [[${user_input}]]; note={{ note or '' }}"}]
    async with engine_on(db_url, pack(ce_rule=rules, ce_response=responses)) as engine:
        result = await engine.aprocess(f"loan note: {HOSTILE}")
    assert "49" not in result.text
    assert result.text.endswith(f"note={HOSTILE}")  # the capture group is data, rendered as written


async def test_nested_thymeleaf_loops_in_a_pack_stop_at_the_template_budget() -> None:
    source = '[# th:each="a : ${range(10000)}"][# th:each="b : ${range(10000)}"]x[/][/]'
    with pytest.raises(PromptRenderError) as info:
        render_text(source, {}, template="ce_response[1].exact_text", limits=TemplateLimits(50, 10_000))
    assert info.value.code == ErrorCode.PROMPT_RENDER_FAILED and "ce_response[1].exact_text" in info.value.message


async def test_thymeleaf_conditions_cannot_reach_python_internals() -> None:
    # the sandbox hides private attributes: the condition sees an undefined value, nothing leaks
    assert render_text('[# th:if="${ce_strings.__class__ != null}"]leak[/]', {}, template="t") == ""
    with pytest.raises(PromptRenderError):
        render_text('[# th:text="${ce_strings.__class__.__mro__}"/]', {}, template="t")
