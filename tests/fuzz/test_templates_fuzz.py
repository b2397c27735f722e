"""Property-based tests of template rendering: values are data, never code; failures are one clear error."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convengine.catalog.errors import ErrorCode, PromptRenderError
from convengine.templates.render import render_prompt, render_text
from tests.fuzz.strategies import json_objects, json_values, user_text

FUZZ = settings(max_examples=200, deadline=None)
TEMPLATE_BITS = ["{{", "}}", "{%", "%}", "{#", "#}", "#{", "[(${", "})]", "[[${", "}]]", "${", "user_input",
                 "context.name", ".", "|", "upper", "__class__", "mro()", "1/0", "range(9)", "for", "endfor",
                 "if", "x", " ", "?:", "?.", "'", '"', "(", ")", "[", "]", "\n", "lipsum", "cycler"]
templates = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(TEMPLATE_BITS), max_size=14).map("".join))
plain_text = st.text(alphabet=st.characters(blacklist_characters="{}#[]$\r", blacklist_categories=["Cs"]),
                     max_size=60)


@FUZZ
@given(value=user_text, before=plain_text, after=plain_text)
def test_user_text_is_rendered_verbatim_never_evaluated(value: str, before: str, after: str) -> None:
    source = f"{before}{{{{user_input}}}}{after}"
    assert render_text(source, {"user_input": value}) == f"{before}{value}{after}"
    assert render_prompt(source, {"user_input": value}, template="t") == f"{before}{value}{after}"


@FUZZ
@given(value=json_values)
def test_structured_values_render_as_json_and_scalars_as_text(value: Any) -> None:
    import json

    if value is None:  # a null shown to the user is an error, unless rendering is permissive
        with pytest.raises(PromptRenderError, match="missing or null"):
            render_text("{{v}}", {"v": value})
        assert render_text("{{v}}", {"v": value}, strict=False) == ""
        return
    rendered = render_text("{{v}}", {"v": value})
    if isinstance(value, (dict, list)):
        assert json.loads(rendered) == value
    elif isinstance(value, bool):
        assert rendered == ("true" if value else "false")
    else:
        assert rendered == str(value)


@FUZZ
@given(source=plain_text)
def test_text_without_template_syntax_is_unchanged(source: str) -> None:
    assert render_text(source, {}) == source


@FUZZ
@given(source=templates, variables=json_objects)
def test_any_template_renders_or_fails_with_one_clear_error(source: str, variables: dict[str, Any]) -> None:
    variables = {**variables, "user_input": "hi", "context": {"name": "Ann"}}
    for render in (lambda: render_text(source, variables, template="ce_response[7].exact_text"),
                   lambda: render_prompt(source, variables, template="ce_prompt_template[7]")):
        try:
            out = render()
        except PromptRenderError as exc:
            assert exc.code in (ErrorCode.PROMPT_RENDER_FAILED, ErrorCode.UNRESOLVED_PROMPT_VARIABLE)
            assert "[7]" in exc.message  # names the row it came from
        else:
            assert isinstance(out, str)
            if "__class__" in source:
                assert "<class 'str'>" not in out  # the sandbox hides dunder attributes


def test_the_sandbox_refuses_to_reach_python_internals() -> None:
    escape = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    for render in (lambda: render_text(escape, {}, template="t"), lambda: render_prompt(escape, {}, template="t")):
        try:
            out = render()
        except PromptRenderError as exc:
            assert exc.code is ErrorCode.PROMPT_RENDER_FAILED
        else:
            assert "subclasses" not in out and "<class" not in out
