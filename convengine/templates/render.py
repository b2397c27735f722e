"""Sandboxed template rendering for EXACT texts, prompts and verbose messages.

Jinja2's sandbox renders ``{{var}}`` and dotted paths; ConvEngine's other syntaxes
(``#{expr}``, ``[(${expr})]``, ``[[${expr}]]``, ``[${expr}]``, SpEL's ``?:`` and ``?.``)
are rewritten to it first. Maps and lists render as JSON. EXACT texts render
permissively (a missing variable renders empty); prompts are strict: every plain
``{{path}}`` must resolve, otherwise ``UNRESOLVED_PROMPT_VARIABLE`` names it.

Every render is bounded (:mod:`convengine.templates.sandbox`): it stops with
``PROMPT_RENDER_FAILED`` after ``settings.template_timeout_ms`` or before building more than
``settings.template_max_output_chars`` characters. The syntax rewrite uses RE2, so it takes linear
time whatever the source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.meta
import re2

from convengine.errors import ErrorCode, PromptRenderError
from convengine.settings import EngineSettings
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

    @classmethod
    def of(cls, source: Any = None) -> TemplateLimits:
        """Limits from settings (``template_timeout_ms``, ``template_max_output_chars``), or the defaults."""
        if source is None or isinstance(source, TemplateLimits):
            return source or DEFAULT_LIMITS
        return cls(source.template_timeout_ms, source.template_max_output_chars)


DEFAULT_LIMITS = TemplateLimits()


def _finalize(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(check_serialised(value, "a printed list or mapping"), ensure_ascii=False, default=str)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class _LenientUndefined(jinja2.ChainableUndefined):
    def __str__(self) -> str:
        return ""


_LENIENT = BoundedSandbox(undefined=_LenientUndefined, finalize=_finalize, autoescape=False,
                          keep_trailing_newline=True)
_STRICT = BoundedSandbox(undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
                         keep_trailing_newline=True)


def translate(source: str) -> str:
    """ConvEngine/Thymeleaf expression forms -> Jinja2 expressions."""
    text = source
    for pattern, replacement in _CONVENGINE_FORMS:
        text = pattern.sub(replacement, text)
    return _EXPR.sub(lambda m: "{{" + m.group(1).replace("?:", " or ").replace("?.", ".") + "}}", text)


@lru_cache(maxsize=2048)
def _compile(source: str, strict: bool) -> jinja2.Template:
    env = _STRICT if strict else _LENIENT
    return env.from_string(translate(source))


@lru_cache(maxsize=2048)
def referenced_names(source: str) -> frozenset[str]:
    """Top-level names a template refers to (what its variables must provide)."""
    try:
        parsed = _LENIENT.parse(translate(source))
    except jinja2.TemplateSyntaxError:
        return frozenset()
    return frozenset(jinja2.meta.find_undeclared_variables(parsed))


def placeholders(source: str) -> list[str]:
    """Plain dotted-path placeholders of a template, in order."""
    found: list[str] = []
    for match in _EXPR.finditer(translate(source)):
        path = _PLAIN_PATH.match(match.group(1))
        if path:
            found.append(path.group(1))
    return found


def resolve_path(variables: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = variables
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return False, None
    return True, node


def _render(source: str, strict: bool, variables: Mapping[str, Any], limits: Any) -> str:
    """Compile (cached) and render under a budget, counting the output as it is produced."""
    bounds = TemplateLimits.of(limits)
    with budget_for(bounds.timeout_ms, bounds.max_chars) as budget:
        parts: list[str] = []
        total = 0
        for chunk in _compile(source, strict).generate(dict(variables)):
            total += len(chunk)
            if total > bounds.max_chars:
                budget.fits(total, "an output")
            parts.append(chunk)
        return "".join(parts)


def render_text(source: str | None, variables: Mapping[str, Any], *, template: str = "template",
                limits: Any = None) -> str:
    """Permissive rendering (EXACT responses, verbose messages): a missing variable renders empty.

    ``limits``: :class:`TemplateLimits` or the settings to take them from (default limits if omitted).

    Raises:
        PromptRenderError: ``PROMPT_RENDER_FAILED`` naming ``template`` when the source does not
            parse, the sandbox refuses it, an expression fails (e.g. a division by zero), or the
            render goes over its time or size limit.
    """
    if not source:
        return ""
    try:
        return _render(source, False, variables, limits)
    except Exception as exc:  # noqa: BLE001 - every template failure becomes one clear error
        raise _render_failed(template, exc) from None


def render_prompt(source: str | None, variables: Mapping[str, Any], *, template: str,
                  limits: Any = None) -> str:
    """Strict rendering for prompts (``limits`` as for :func:`render_text`).

    Raises:
        PromptRenderError: ``UNRESOLVED_PROMPT_VARIABLE`` naming the variable and ``template``,
            or ``PROMPT_RENDER_FAILED`` for a template that does not parse, fails to render or
            goes over its time or size limit.
    """
    if not source:
        return ""
    missing = [p for p in placeholders(source) if not resolve_path(variables, p)[0]]
    if missing:
        raise PromptRenderError(
            f"{template} refers to {', '.join(repr(m) for m in dict.fromkeys(missing))}, which "
            f"{'has' if len(missing) == 1 else 'have'} no value in this turn",
            details={"template": template, "missingPromptVars": list(dict.fromkeys(missing))},
        )
    try:
        return _render(source, True, variables, limits)
    except jinja2.UndefinedError as exc:
        raise PromptRenderError(f"{template}: {exc.message}", details={"template": template}) from None
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
