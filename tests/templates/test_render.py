"""Template rendering as pack authors use it: ConvEngine's expression forms, how values print,
strict texts and prompts (undefined and null), the sandbox, one clear error per failure naming
the template, and the time and size budget of every render."""

from __future__ import annotations

from typing import Any

import pytest

from convengine.catalog.errors import ErrorCode, PromptRenderError
from convengine.settings import EngineSettings
from convengine.templates import placeholders, render_prompt, render_text, translate
from convengine.templates.render import TemplateLimits, check_syntax, referenced_names

TIGHT = TemplateLimits(timeout_ms=100, max_chars=50, strict_text=True)


def failure(source: str, variables: dict[str, Any] | None = None, *, prompt: bool = False,
            **kwargs: Any) -> PromptRenderError:
    with pytest.raises(PromptRenderError) as info:
        if prompt:
            render_prompt(source, variables or {}, template="ce_prompt_template[4].user_prompt", **kwargs)
        else:
            render_text(source, variables or {}, template="ce_response[3].exact_text", **kwargs)
    return info.value


@pytest.mark.parametrize("source", ["{{size}}", "#{size}", "[(${size})]", "[${size}]", "[[${size}]]",
                                    "{{ size }}", "{{ inputParams.size }}"])
def test_every_expression_form_renders_the_same_value(source: str) -> None:
    assert render_text(f"<{source}>", {"size": "large", "inputParams": {"size": "large"}}) == "<large>"


def test_only_the_escaped_form_escapes_html() -> None:
    value = {"name": "<b>Tom & Jerry</b>"}
    assert render_text("[[${name}]]", value) == "&lt;b&gt;Tom &amp; Jerry&lt;/b&gt;"
    assert render_text("[(${name})] {{name}} #{name}", value) == "<b>Tom & Jerry</b> " * 2 + "<b>Tom & Jerry</b>"


def test_spel_elvis_and_safe_navigation() -> None:
    assert translate("{{ a ?: 'x' }}") == "{{ a  or  'x' }}"
    assert render_text("{{ nickname ?: name }}", {"name": "Jo"}) == "Jo"
    assert render_text("{{ nickname ?: name }}", {"nickname": "", "name": "Jo"}) == "Jo"  # empty counts as absent
    assert render_text("{{ nickname ?: name }}", {"nickname": "JJ", "name": "Jo"}) == "JJ"
    assert render_text("{{ user?.name }}", {"user": {"name": "Jo"}}) == "Jo"
    # a missing or null link of a safe chain makes the whole chain null, not a failure
    assert render_text("{{ user?.address?.city ?: 'nowhere' }}", {}) == "nowhere"
    assert render_text("{{ user?.address.city ?: 'nowhere' }}", {"user": None}) == "nowhere"
    assert render_text("{{ user?.address?.city }}", {"user": {"address": {"city": "Oslo"}}}) == "Oslo"


@pytest.mark.parametrize(("value", "shown"), [
    (True, "true"), (False, "false"), (0, "0"), (1.5, "1.5"), ("", ""),
    ({"k": ["é", None]}, '{"k": ["é", null]}'), ([1, "two"], '[1, "two"]'), ((1, 2), "[1, 2]"),
])
def test_how_values_print(value: Any, shown: str) -> None:
    assert render_text("{{v}}", {"v": value}) == shown
    assert render_prompt("{{v}}", {"v": value}, template="t") == shown


def test_a_strict_text_names_every_missing_or_null_variable_once() -> None:
    error = failure("Hi {{name}}, your {{order.size}} {{name}} {{order.crust}}",
                    {"order": {"size": None}})
    assert error.code is ErrorCode.UNRESOLVED_PROMPT_VARIABLE
    assert error.message == ("ce_response[3].exact_text refers to 'name', 'order.size', 'order.crust', which have no "
                             "value (missing or null) in this turn")
    assert error.details["missingPromptVars"] == ["name", "order.size", "order.crust"]


def test_a_strict_text_allows_absence_where_the_author_asked_for_it() -> None:
    assert render_text("[{{ x | default('') }}]", {}) == "[]"
    assert render_text("[{{ x or 'none' }}]", {}) == "[none]"
    assert render_text("{% if x %}{{x}}{% else %}no x{% endif %}", {}) == "no x"
    assert render_text("{% if x %}{{x}}{% endif %}!", {"x": None}) == "!"


def test_a_null_inside_an_expression_still_fails_a_strict_text() -> None:
    error = failure("{{ order['size'] }}", {"order": {"size": None}})
    assert error.code is ErrorCode.UNRESOLVED_PROMPT_VARIABLE and "null" in error.message


def test_a_permissive_text_renders_absent_and_null_values_empty() -> None:
    variables = {"a": {}, "n": None}
    assert render_text("[{{missing}}|{{a.b.c}}|{{n}}]", variables, strict=False) == "[||]"
    relaxed = TemplateLimits.of(EngineSettings(template_strict=False))
    assert render_text("[{{missing}}]", {}, limits=relaxed) == "[]"
    with pytest.raises(PromptRenderError):
        render_text("[{{missing}}]", {}, limits=TemplateLimits.of(EngineSettings()))  # strict by default


def test_a_prompt_needs_every_path_but_a_null_renders_empty() -> None:
    assert render_prompt("size={{size}} crust={{order.crust}}", {"size": None, "order": {"crust": None}},
                         template="t") == "size= crust="
    error = failure("Customer {{customer.name}} said {{user_input}}", {"user_input": "hi", "customer": {}},
                    prompt=True)
    assert error.code is ErrorCode.UNRESOLVED_PROMPT_VARIABLE
    assert error.message == ("ce_prompt_template[4].user_prompt refers to 'customer.name', which has no value in "
                             "this turn")


@pytest.mark.parametrize(("source", "variables", "reason", "error_class"), [
    ("{{ size | shout }}", {"size": 1}, "does not parse: No filter named 'shout'.", "TemplateAssertionError"),
    ("{{ size ", {"size": 1}, "does not parse: unexpected end of template", "TemplateSyntaxError"),
    ("{{ 1 / n }}", {"n": 0}, "failed to render: ZeroDivisionError: division by zero", "ZeroDivisionError"),
    ("{{ items.append(4) }}", {"items": [1]}, "tried something the sandbox forbids: access to attribute 'append'",
     "SecurityError"),
    ("{{ (n).__class__.__name__ }}", {"n": 1}, "tried something the sandbox forbids", "SecurityError"),
    ('[# th:if="${n}"]never closed', {"n": 1}, "does not parse: a Thymeleaf [# th:...] block is never closed",
     "TemplateSyntaxError"),
])
def test_a_template_that_fails_is_one_error_naming_the_template(source: str, variables: dict[str, Any],
                                                               reason: str, error_class: str) -> None:
    for prompt in (False, True):
        error = failure(source, variables, prompt=prompt)
        assert error.code is ErrorCode.PROMPT_RENDER_FAILED
        template = "ce_prompt_template[4].user_prompt" if prompt else "ce_response[3].exact_text"
        assert error.message.startswith(f"{template} {reason}"), error.message
        assert error.details == {"template": template, "errorClass": error_class}


def test_lipsum_is_not_available() -> None:
    error = failure("{{ lipsum() }}")
    assert "'lipsum' is undefined" in error.message


@pytest.mark.parametrize(("source", "variables", "limit", "kind"), [
    ("{{ 'ab' * 100 }}", {}, "would build a repeated value of 200 characters, over the limit of 50", "TemplateTooLarge"),
    ("{{ text }}", {"text": "y" * 51}, "would build an output of 51 characters, over the limit of 50", "TemplateTooLarge"),
    ("{% for i in range(30) %}ab{% endfor %}", {}, "over the limit of 50", "TemplateTooLarge"),
    ("{% for i in range(9999) %}{% for j in range(9999) %}{% endfor %}{% endfor %}", {},
     "took longer than 100 ms to render (settings.template_timeout_ms)", "TemplateTimeout"),
    ("{{ range(100000) | list | length }}", {}, "range() of 100000 numbers is over the limit", "TemplateTooLarge"),
])
def test_every_render_is_bounded_in_time_and_size(source: str, variables: dict[str, Any], limit: str,
                                                  kind: str) -> None:
    error = failure(source, variables, limits=TIGHT)
    assert error.code is ErrorCode.PROMPT_RENDER_FAILED and limit in error.message, error.message
    assert error.details["errorClass"] == kind


def test_output_at_the_size_limit_is_allowed() -> None:
    assert render_text("{{ text }}", {"text": "y" * 50}, limits=TIGHT) == "y" * 50
    assert render_text("{% for i in range(25) %}ab{% endfor %}", {}, limits=TIGHT) == "ab" * 25


def test_limits_come_from_the_settings() -> None:
    limits = TemplateLimits.of(EngineSettings(template_timeout_ms=250, template_max_output_chars=1234))
    assert (limits.timeout_ms, limits.max_chars, limits.strict_text) == (250, 1234, True)
    assert TemplateLimits.of(None) == TemplateLimits() and TemplateLimits.of(TIGHT) is TIGHT


def test_an_empty_or_missing_source_renders_empty() -> None:
    assert render_text(None, {}) == render_text("", {}) == render_prompt(None, {}, template="t") == ""


def test_placeholders_outside_blocks_are_the_ones_checked_up_front() -> None:
    source = "{{a}} {% if b %}{{c}}{% endif %} {{d.e}} {{ f | upper }} [(${g})] {% for x in xs %}{{x.y}}{% endfor %}{{h}}"
    assert placeholders(source) == ["a", "d.e", "g", "h"]
    assert placeholders("{{ unclosed") == []


def test_check_syntax_and_referenced_names_for_load_time_checks() -> None:
    assert check_syntax("fine {{a}}") is None and check_syntax(None) is None
    assert check_syntax("{{ a ") == "does not parse: unexpected end of template, expected 'end of print statement'. (line 1)"
    assert check_syntax("ok\n{% for %}") == "does not parse: Expected an expression, got 'end of statement block' (line 2)"
    assert referenced_names("{{a.b}} {% for x in items %}{{x}}{% endfor %} {{ range(3) | list }} #{c}") == \
        frozenset({"a", "items", "c"})
