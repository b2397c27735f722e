"""ConvEngine's Thymeleaf text blocks render (never reach the user as written), their SpEL
conditions mean what they mean in ConvEngine, and a block the engine cannot run is a syntax
error naming the line."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest

from convengine.templates import render_text
from convengine.templates.thymeleaf import Strings, spel, translate_blocks

ANSWER = ('[# th:if="${context != null and context.mcp != null and !#strings.isEmpty(context.mcp.finalAnswer)}"]'
          '[[${context.mcp.finalAnswer}]][/][# th:unless="${context != null and context.mcp != null and context.mcp.finalAnswer != null}"]No answer yet.[/]')


@pytest.mark.parametrize(("context", "shown"), [
    ({"mcp": {"finalAnswer": "42 rows"}}, "42 rows"),
    ({"mcp": {"finalAnswer": None}}, "No answer yet."),
    ({"mcp": {}}, "No answer yet."),
    ({}, "No answer yet."),
])
def test_if_and_unless_choose_what_the_user_sees(context: dict[str, Any], shown: str) -> None:
    assert render_text(ANSWER, {"context": context}) == shown


def test_safe_navigation_in_a_condition_tolerates_a_missing_intermediate() -> None:
    source = '[# th:if="${context?.mcp?.finalAnswer != null}"]answered[/][# th:unless="${context?.mcp?.finalAnswer != null}"]waiting[/]'
    assert render_text(source, {"context": {"mcp": {"finalAnswer": "x"}}}) == "answered"
    assert render_text(source, {"context": {}}) == "waiting"


def test_a_blank_answer_shows_neither_branch() -> None:
    # isEmpty("  ") is true and the value is not null: the if is false and the unless is false too
    assert render_text(ANSWER, {"context": {"mcp": {"finalAnswer": "  "}}}) == ""


@pytest.mark.parametrize(("condition", "variables", "holds"), [
    ("${a == null}", {}, True),  # a missing value is null, as in SpEL
    ("${a == null}", {"a": None}, True),
    ("${a != null}", {"a": 0}, True),
    ("${a != null && b}", {"a": 1, "b": False}, False),
    ("${a != null || b}", {"b": True}, True),
    ("${!a}", {"a": ""}, True),
    ("${not a}", {"a": "x"}, False),
    ("${#strings.isNotEmpty(name) and #strings.length(name) == 2}", {"name": "Jo"}, True),
    ("${#strings.contains(name, 'o') and #strings.startsWith(name, 'J') and #strings.endsWith(name, 'o')}",
     {"name": "Jo"}, True),
    ("${#strings.toLowerCase(code) == 'abc' and #strings.toUpperCase(code) == 'ABC'}", {"code": "aBc"}, True),
    ("${#strings.trim(name) == 'Jo'}", {"name": "  Jo "}, True),
    ("${#strings.isEmpty(missing)}", {}, True),
])
def test_spel_conditions(condition: str, variables: dict[str, Any], holds: bool) -> None:
    source = f'[# th:if="{condition}"]yes[/][# th:unless="{condition}"]no[/]'
    assert render_text(source, variables) == ("yes" if holds else "no")


def test_each_repeats_its_body_and_text_tags_print_a_value() -> None:
    source = 'Items:[# th:each="line : ${order.lines}"] [# th:text="${line.name}"/]x[(${line.qty})][/].'
    order = {"lines": [{"name": "pizza", "qty": 2}, {"name": "cola", "qty": 1}]}
    assert render_text(source, {"order": order}) == "Items: pizzax2 colax1."
    assert render_text(source, {"order": {"lines": []}}) == "Items:."


def test_a_key_named_like_a_dict_method_is_the_value() -> None:
    assert render_text("{{ order.items }}|{{ order.keys }}", {"order": {"items": ["a"], "keys": 2}}) == '["a"]|2'


def test_text_escapes_like_inline_forms_and_utext_does_not_escape_either() -> None:
    # th:text and th:utext both print as written here (ConvEngine renders TEXT mode, where no escaping applies)
    assert render_text('[# th:text="${v}"/]|[# th:utext="${v}"/]', {"v": "<b>"}) == "<b>|<b>"


def test_blocks_nest() -> None:
    source = '[# th:each="row : ${rows}"][# th:if="${row.ok}"]+[/][# th:unless="${row.ok}"]-[/][/]'
    assert render_text(source, {"rows": [{"ok": True}, {"ok": False}, {"ok": True}]}) == "+-+"


def test_text_without_blocks_is_left_alone() -> None:
    assert translate_blocks("plain [text] with # and / and [ / ]") == "plain [text] with # and / and [ / ]"


@pytest.mark.parametrize(("source", "message", "line"), [
    ("[/]", "'[/]' closes no Thymeleaf block", 1),
    ('one\ntwo [# th:if="${a}"]open', "a Thymeleaf [# th:...] block is never closed with [/] (1 open)", 2),
    ('[# th:each="i, status : ${items}"]x[/]', "th:each must read 'name : ${list}' (no status variable)", 1),
    ('[# th:each="${items}"]x[/]', "th:each must read 'name : ${list}'", 1),
    ('\n\n[# th:block]x[/]', "unsupported Thymeleaf text block '[# th:block]'", 3),
    ('[# th:if="${a}"/]', "unsupported Thymeleaf text block", 1),
    ('[# th:remove="all"]x[/]', "unsupported Thymeleaf text block", 1),
])
def test_blocks_the_engine_cannot_run_are_syntax_errors_naming_the_line(source: str, message: str,
                                                                        line: int) -> None:
    with pytest.raises(jinja2.TemplateSyntaxError) as info:
        translate_blocks(source)
    assert message in info.value.message and info.value.lineno == line


def test_spel_is_rewritten_to_jinja() -> None:
    assert spel("${a != null and !#strings.isEmpty(a)}") == "(a is not ce_null and  not ce_strings.isEmpty(a))"
    assert spel("${a} && ${b} || ${c == null}") == "(a)  and  (b)  or  (c is ce_null)"


def test_the_strings_helper_treats_null_as_empty_text() -> None:
    strings = Strings()
    assert strings.isEmpty(None) and strings.isEmpty("  ") and not strings.isNotEmpty(None)
    assert strings.length(None) == 0 and strings.length(12) == 2 and strings.trim(None) == ""
    assert strings.contains(None, "") and not strings.contains(None, "a")
