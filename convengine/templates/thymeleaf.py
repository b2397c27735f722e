"""Thymeleaf text blocks -> Jinja2 statements.

ConvEngine's templates use Thymeleaf's TEXT-mode blocks; they are rewritten here, before the
inline forms (``[[${x}]]``...), so they render instead of reaching the user as written:

* ``[# th:if="${cond}"]...[/]`` and ``[# th:unless="${cond}"]...[/]``;
* ``[# th:each="item : ${items}"]...[/]`` (iteration status variables are not supported);
* ``[# th:text="${x}"/]`` and ``[# th:utext="${x}"/]``.

Conditions are SpEL as ConvEngine writes them: ``and``/``or``/``!``/``not``, ``&&``/``||``,
``== null``/``!= null`` (a missing value counts as null), ``?:``, ``?.`` and
``#strings.isEmpty(x)`` (with ``isNotEmpty``, ``contains``, ``startsWith``, ``endsWith``,
``toUpperCase``, ``toLowerCase``, ``trim``, ``length``). Anything else that opens with ``[#``, an
unclosed block or a stray ``[/]`` is a template syntax error (so validation names the row).
"""

from __future__ import annotations

from typing import Protocol

import jinja2
import re2

_TAG = re2.compile(r"\[#\s*th:(\w+)\s*=\s*\"([^\"]*)\"\s*(/?)\]|\[#[^\]]*\]|\[/\]")
_EACH = re2.compile(r"^\s*([A-Za-z_]\w*)\s*(,\s*[A-Za-z_]\w*\s*)?:\s*(.+?)\s*$")
_DOLLAR = re2.compile(r"\$\{(.+?)\}")
_SPEL = [
    (re2.compile(r"\s*!=\s*null\b"), " is not ce_null"),
    (re2.compile(r"\s*==\s*null\b"), " is ce_null"),
    (re2.compile(r"\bnull\b"), "none"),
    (re2.compile(r"&&"), " and "),
    (re2.compile(r"\|\|"), " or "),
    (re2.compile(r"!([^=])"), r" not \1"),
    (re2.compile(r"#strings\."), "ce_strings."),
    (re2.compile(r"\?:"), " or "),
]
_SAFE_CHAIN = re2.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\?\.([A-Za-z_]\w*(?:\??\.[A-Za-z_]\w*)*)")
NAVIGATE = "ce_nav"


class _Match(Protocol):
    """What this module reads of a ``re2`` match (the bindings ship no type hints)."""

    def group(self, index: int, /) -> str | None: ...

    def start(self) -> int: ...


def safe_navigation(expression: str) -> str:
    """SpEL's safe navigation, ``a?.b.c``: null (not a failure) when ``a`` or anything after it is
    null or missing, written ``ce_nav(a, 'b', 'c')``."""
    def navigate(match: _Match) -> str:
        names = str(match.group(2)).replace("?.", ".").split(".")
        return f"{NAVIGATE}({match.group(1)}, " + ", ".join(repr(name) for name in names) + ")"

    return _SAFE_CHAIN.sub(navigate, expression)


def is_null(value: object) -> bool:
    """The ``ce_null`` test: None or undefined (a missing value is null, as in SpEL)."""
    return value is None or isinstance(value, jinja2.Undefined)


class Strings:
    """Thymeleaf's ``#strings`` utility object (the subset ConvEngine's templates use)."""

    @staticmethod
    def _text(value: object) -> str:
        return "" if is_null(value) else str(value)

    def isEmpty(self, value: object) -> bool:
        return not self._text(value).strip()

    def isNotEmpty(self, value: object) -> bool:
        return not self.isEmpty(value)

    def contains(self, value: object, part: object) -> bool:
        return self._text(part) in self._text(value)

    def startsWith(self, value: object, part: object) -> bool:
        return self._text(value).startswith(self._text(part))

    def endsWith(self, value: object, part: object) -> bool:
        return self._text(value).endswith(self._text(part))

    def toUpperCase(self, value: object) -> str:
        return self._text(value).upper()

    def toLowerCase(self, value: object) -> str:
        return self._text(value).lower()

    def trim(self, value: object) -> str:
        return self._text(value).strip()

    def length(self, value: object) -> int:
        return len(self._text(value))


def install(env: jinja2.Environment) -> None:
    """Make the ``ce_null`` test, ``ce_strings`` and safe navigation available to translated templates."""
    env.tests["ce_null"] = is_null
    env.globals["ce_strings"] = Strings()

    def navigate(value: object, *names: str) -> object:
        for name in names:
            if is_null(value):
                return None
            value = env.getattr(value, name)
        return None if is_null(value) else value

    env.globals[NAVIGATE] = navigate


def spel(expression: str) -> str:
    """A SpEL condition (``${...}`` parts unwrapped) as a Jinja expression."""
    text = safe_navigation(_DOLLAR.sub(r"(\1)", expression))
    for pattern, replacement in _SPEL:
        text = pattern.sub(replacement, text)
    return text.strip()


def _syntax_error(message: str, source: str, offset: int) -> jinja2.TemplateSyntaxError:
    return jinja2.TemplateSyntaxError(message, source.count("\n", 0, offset) + 1)


def translate_blocks(source: str) -> str:
    """Rewrite every Thymeleaf text block; raises ``TemplateSyntaxError`` naming what is wrong."""
    if "[#" not in source and "[/]" not in source:
        return source
    out: list[str] = []
    open_blocks: list[tuple[str, int]] = []
    position = 0
    for match in _TAG.finditer(source):
        out.append(source[position:match.start()])
        position = match.end()
        if match.group(0) == "[/]":
            if not open_blocks:
                raise _syntax_error("'[/]' closes no Thymeleaf block", source, match.start())
            out.append("{% end" + open_blocks.pop()[0] + " %}")
            continue
        out.append(_open(match, source, open_blocks))
    if open_blocks:
        raise _syntax_error(f"a Thymeleaf [# th:...] block is never closed with [/] "
                            f"({len(open_blocks)} open)", source, open_blocks[-1][1])
    out.append(source[position:])
    return "".join(out)


def _open(match: _Match, source: str, open_blocks: list[tuple[str, int]]) -> str:
    attribute, value, closed = match.group(1), match.group(2) or "", match.group(3) == "/"
    where = match.start()
    if attribute in ("text", "utext") and closed:
        return "{{ " + spel(value) + " }}"
    if closed or attribute not in ("if", "unless", "each"):
        raise _syntax_error(f"unsupported Thymeleaf text block {match.group(0)!r} (supported: "
                            "[# th:if=...], [# th:unless=...], [# th:each=...] closed by [/], "
                            "[# th:text=.../], [# th:utext=.../])", source, where)
    if attribute == "each":
        each = _EACH.match(value)
        if each is None or each.group(2):
            raise _syntax_error(f"th:each must read 'name : ${{list}}' (no status variable), got {value!r}",
                                source, where)
        open_blocks.append(("for", where))
        return "{% for " + each.group(1) + " in (" + spel(each.group(3)) + ") %}"
    open_blocks.append(("if", where))
    condition = spel(value)
    return "{% if " + (f"not ({condition})" if attribute == "unless" else condition) + " %}"
