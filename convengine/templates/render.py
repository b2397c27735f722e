"""Sandboxed template rendering for EXACT texts, prompts and verbose messages.

Jinja2's sandbox renders ``{{var}}`` and dotted paths; ConvEngine's other syntaxes
(``#{expr}``, ``[(${expr})]``, ``[[${expr}]]``, ``[${expr}]``, SpEL's ``?:`` and ``?.``)
are rewritten to it first, and so are Thymeleaf text blocks (``[# th:if="${x != null}"]...[/]``,
:mod:`convengine.templates.thymeleaf`). Maps and lists render as JSON.

Prompts are strict: every plain ``{{path}}`` must resolve, otherwise ``UNRESOLVED_PROMPT_VARIABLE``
names it; a null value renders empty (prompt variables such as not-yet-collected schema fields are
null by design). Texts shown to the user (EXACT responses) are strict too unless the pack sets
``template_strict: false``: a variable that is undefined *or null* is ``UNRESOLVED_PROMPT_VARIABLE``
naming the row, instead of a hole in the answer; write ``{{ x or '' }}`` or guard with
``[# th:if="${x != null}"]`` where a missing value is expected. With ``template_strict: false`` they
render as ConvEngine's do: undefined and null render empty.

Every render is bounded (:mod:`convengine.templates.sandbox`): it stops with
``PROMPT_RENDER_FAILED`` after ``settings.template_timeout_ms`` or before building more than
``settings.template_max_output_chars`` characters. The syntax rewrite uses RE2, so it takes linear
time whatever the source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.meta
import re2

from convengine.catalog.errors import ErrorCode, PromptRenderError
from convengine.settings import EngineSettings
from convengine.templates import thymeleaf
from convengine.templates.sandbox import BoundedSandbox, TemplateBudgetError, budget_for, check_serialised

_CONVENGINE_FORMS = [
    (re2.compile(r"(?s)\[\(\$\{(.+?)\}\)\]"), r"{{ \1 }}"),
    (re2.compile(r"(?s)\[\[\$\{(.+?)\}\]\]"), r"{{ (\1) | e }}"),
    (re2.compile(r"(?s)\[\$\{(.+?)\}\]"), r"{{ \1 }}"),
    (re2.compile(r"(?s)#\{(.+?)\}"), r"{{ \1 }}"),
]
_EXPR = re2.compile(r"(?s)\{\{(.+?)\}\}")
_PLAIN_PATH = re.compile(r"^\s*([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\s*$")


@dataclass(frozen=True, slots=True)
class TemplateLimits:
    """How long one render may take and how many characters it may build."""

    timeout_ms: float = EngineSettings.model_fields["template_timeout_ms"].default
    max_chars: int = EngineSettings.model_fields["template_max_output_chars"].default
    strict_text: bool = EngineSettings.model_fields["template_strict"].default

    @classmethod
    def of(cls, source: Limits = None) -> TemplateLimits:
        """Limits from settings (``template_timeout_ms``, ``template_max_output_chars``,
        ``template_strict``), or the defaults."""
        if source is None or isinstance(source, TemplateLimits):
            return source or DEFAULT_LIMITS
        return cls(source.template_timeout_ms, source.template_max_output_chars,
                   getattr(source, "template_strict", True))


DEFAULT_LIMITS = TemplateLimits()
Limits = EngineSettings | TemplateLimits | None
"""What a render's bounds come from: the settings, limits themselves, or None for the defaults."""


def _finalize(value: object) -> object:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(check_serialised(value, "a printed list or mapping"), ensure_ascii=False, default=str)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class NullValueError(Exception):
    """A strict text shows a null value."""


def _finalize_not_null(value: object) -> object:
    if value is None:
        raise NullValueError("shows a value that is null")
    return _finalize(value)


class _LenientUndefined(jinja2.ChainableUndefined):
    def __str__(self) -> str:
        return ""


class _TestableUndefined(jinja2.StrictUndefined):
    """Strict (printing, iterating or reading into an undefined name fails), except that testing it
    is allowed: ``x or 'none'``, SpEL's ``x ?: 'none'`` and ``{% if x %}`` take an absent ``x`` as false."""

    __slots__ = ()

    # jinja2 types StrictUndefined.__bool__ as always raising (-> NoReturn); allowing the test is the point
    def __bool__(self) -> bool:  # type: ignore[override]
        return False


def _sandbox(undefined: type[jinja2.Undefined], finalize: Callable[[object], object]) -> BoundedSandbox:
    env = BoundedSandbox(undefined=undefined, finalize=finalize, autoescape=False, keep_trailing_newline=True)
    thymeleaf.install(env)
    return env


_LENIENT = _sandbox(_LenientUndefined, _finalize)
_STRICT = _sandbox(_TestableUndefined, _finalize)
_STRICT_TEXT = _sandbox(_TestableUndefined, _finalize_not_null)
_ENVS = {"lenient": _LENIENT, "prompt": _STRICT, "text": _STRICT_TEXT}


def translate(source: str) -> str:
    """ConvEngine/Thymeleaf expression forms and text blocks -> Jinja2.

    Raises:
        jinja2.TemplateSyntaxError: a Thymeleaf block is unsupported, unclosed or closes nothing.
    """
    text = thymeleaf.translate_blocks(source)
    for pattern, replacement in _CONVENGINE_FORMS:
        text = pattern.sub(replacement, text)
    return _EXPR.sub(lambda m: "{{" + thymeleaf.safe_navigation(m.group(1)).replace("?:", " or ") + "}}", text)


@lru_cache(maxsize=2048)
def _compile(source: str, mode: str) -> jinja2.Template:
    return _ENVS[mode].from_string(translate(source))


_MARKERS = ("{{", "{%", "{#")


@lru_cache(maxsize=2048)
def _static_text(source: str, mode: str) -> str | None:
    """What ``source`` renders to when it is plain text (no expression, block or comment once translated
    from ConvEngine's forms), whatever the variables; None when it is a template."""
    try:
        if any(marker in translate(source) for marker in _MARKERS):
            return None
        return str(_compile(source, mode).render({}))
    except Exception:  # noqa: BLE001 - rendered (and reported) the usual way
        return None


def check_syntax(source: str | None) -> str | None:
    """Why ``source`` does not compile (``does not parse: ... (line N)``), or None when it does."""
    if not source:
        return None
    try:
        _compile(source, "prompt")
    except jinja2.TemplateSyntaxError as exc:
        return f"does not parse: {exc.message} (line {exc.lineno})"
    except Exception as exc:  # noqa: BLE001 - the sandbox refusing a constant, for instance
        return f"does not compile: {type(exc).__name__}: {exc}"
    return None


@lru_cache(maxsize=2048)
def referenced_names(source: str) -> frozenset[str]:
    """Top-level names a template refers to (what its variables must provide)."""
    try:
        parsed = _LENIENT.parse(translate(source))
    except jinja2.TemplateSyntaxError:
        return frozenset()
    return frozenset(jinja2.meta.find_undeclared_variables(parsed)) - set(_LENIENT.globals)


_STATEMENT = re2.compile(r"\{%-?\s*(\w+)")


def placeholders(source: str) -> list[str]:
    """Plain dotted-path placeholders of a template, in order, outside ``if``/``for`` blocks
    (a guarded placeholder is checked when its block renders)."""
    return list(_placeholders(source))


@lru_cache(maxsize=2048)
def _placeholders(source: str) -> tuple[str, ...]:
    return tuple(_find_placeholders(source))


def _find_placeholders(source: str) -> list[str]:
    try:
        text = translate(source)
    except jinja2.TemplateSyntaxError:
        return []
    found: list[str] = []
    depth, position = 0, 0
    for statement in _STATEMENT.finditer(text):
        if depth == 0:
            found.extend(_plain_paths(text[position:statement.start()]))
        keyword = statement.group(1)
        depth += 1 if keyword in ("if", "for") else -1 if keyword in ("endif", "endfor") else 0
        position = statement.end()
    if depth == 0:
        found.extend(_plain_paths(text[position:]))
    return found


def _plain_paths(text: str) -> list[str]:
    return [path.group(1) for match in _EXPR.finditer(text) if (path := _PLAIN_PATH.match(match.group(1)))]


def resolve_path(variables: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = variables
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return False, None
    return True, node


def _render(source: str, mode: str, variables: Mapping[str, Any], limits: Limits) -> str:
    """Compile (cached) and render under a budget, counting the output as it is produced."""
    bounds = TemplateLimits.of(limits)
    with budget_for(bounds.timeout_ms, bounds.max_chars) as budget:
        parts: list[str] = []
        total = 0
        for chunk in _compile(source, mode).generate(dict(variables)):
            total += len(chunk)
            if total > bounds.max_chars:
                budget.fits(total, "an output")
            parts.append(chunk)
        return "".join(parts)


def render_text(source: str | None, variables: Mapping[str, Any], *, template: str = "template",
                limits: Limits = None, strict: bool | None = None) -> str:
    """Texts shown to the user (EXACT responses, verbose messages, questions).

    Strict unless ``strict=False`` or the settings say ``template_strict: false``: a variable that
    is undefined or null is an error; permissive, it renders empty. ``limits``:
    :class:`TemplateLimits` or the settings to take them from (default limits if omitted).

    Raises:
        PromptRenderError: ``UNRESOLVED_PROMPT_VARIABLE`` (strict) naming the variable and
            ``template``; ``PROMPT_RENDER_FAILED`` naming ``template`` when the source does not
            parse, the sandbox refuses it, an expression fails (e.g. a division by zero), or the
            render goes over its time or size limit.
    """
    if not source:
        return ""
    bounds = TemplateLimits.of(limits)
    if strict is None:
        strict = bounds.strict_text
    static = _static_text(source, "text" if strict else "lenient")
    if static is not None and len(static) <= bounds.max_chars:
        return static  # plain text (most responses): nothing to resolve, rendered once
    if strict:
        _require(source, variables, template, nulls=True)
    try:
        return _render(source, "text" if strict else "lenient", variables, limits)
    except (jinja2.UndefinedError, NullValueError) as exc:
        raise _unresolved(template, exc) from None
    except Exception as exc:  # noqa: BLE001 - every template failure becomes one clear error
        raise _render_failed(template, exc) from None


def _require(source: str, variables: Mapping[str, Any], template: str, *, nulls: bool) -> None:
    """Every plain placeholder outside a block resolves (and, with ``nulls``, is not null)."""
    missing = []
    for path in placeholders(source):
        found, value = resolve_path(variables, path)
        if not found or (nulls and value is None):
            missing.append(path)
    if missing:
        names = list(dict.fromkeys(missing))
        verb = ("has" if len(names) == 1 else "have") + (" no value (missing or null)" if nulls else " no value")
        raise PromptRenderError(
            f"{template} refers to {', '.join(repr(m) for m in names)}, which {verb} in this turn",
            details={"template": template, "missingPromptVars": names},
        )


def _unresolved(template: str, exc: Exception) -> PromptRenderError:
    message = exc.message if isinstance(exc, jinja2.UndefinedError) else str(exc)
    return PromptRenderError(f"{template}: {message}", details={"template": template,
                                                                "errorClass": type(exc).__name__})


def render_prompt(source: str | None, variables: Mapping[str, Any], *, template: str,
                  limits: Limits = None) -> str:
    """Strict rendering for prompts (``limits`` as for :func:`render_text`).

    Raises:
        PromptRenderError: ``UNRESOLVED_PROMPT_VARIABLE`` naming the variable and ``template``,
            or ``PROMPT_RENDER_FAILED`` for a template that does not parse, fails to render or
            goes over its time or size limit.
    """
    if not source:
        return ""
    static = _static_text(source, "prompt")
    if static is not None and len(static) <= TemplateLimits.of(limits).max_chars:
        return static  # plain text (most system prompts): nothing to resolve, rendered once
    _require(source, variables, template, nulls=False)
    try:
        return _render(source, "prompt", variables, limits)
    except jinja2.UndefinedError as exc:
        raise _unresolved(template, exc) from None
    except Exception as exc:  # noqa: BLE001 - every template failure becomes one clear error
        raise _render_failed(template, exc) from None


def _render_failed(template: str, exc: Exception) -> PromptRenderError:
    if isinstance(exc, TemplateBudgetError):
        return PromptRenderError(f"{template} {exc}", code=ErrorCode.PROMPT_RENDER_FAILED,
                                 details={"template": template, "errorClass": exc.kind})
    if isinstance(exc, jinja2.TemplateSyntaxError):
        reason = f"does not parse: {exc.message} (line {exc.lineno})"
    elif isinstance(exc, jinja2.exceptions.SecurityError):
        reason = f"tried something the sandbox forbids: {exc}"
    else:
        reason = f"failed to render: {type(exc).__name__}: {exc}"
    return PromptRenderError(f"{template} {reason}", code=ErrorCode.PROMPT_RENDER_FAILED,
                             details={"template": template, "errorClass": type(exc).__name__})
