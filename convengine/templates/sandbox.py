"""A Jinja sandbox with a budget: every render is bounded in time and in the size of what it builds.

:class:`BoundedSandbox` is Jinja's immutable sandbox plus a per-render :class:`Budget` (a context
variable set by :func:`budget_for`):

* **time** - every loop iteration, call (macros included), intercepted operator and filter
  checks the deadline (``settings.template_timeout_ms``), so work stops at the deadline whatever
  the template does: without loops or calls a template does work linear in its source. Loops
  are guarded by rewriting ``{% for %}`` to iterate through :func:`guarded_loop` before code
  generation;
* **size** - output, block and macro results, ``~`` joins, call and filter results may not exceed
  ``settings.template_max_output_chars``; and what would allocate a large value is refused *before*
  it runs: ``range()`` beyond :data:`RANGE_LIMIT` numbers, ``'a' * n`` and ``[x] * n``, ``+`` of
  long sequences, ``**`` and ``*`` of huge numbers, widths in ``%``/``format()`` specs,
  ``str.ljust/center/zfill/expandtabs/replace/join`` and the ``center``, ``indent``, ``replace``,
  ``join``, ``format`` and ``tojson`` filters. ``lipsum`` is not available.

A template that goes over budget raises :class:`TemplateBudgetError`.
"""

from __future__ import annotations

import functools
import math
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar, cast

from jinja2 import nodes, pass_context
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

RANGE_LIMIT = 10_000
"""Numbers one ``range()`` may produce."""
MAX_INT_BITS = 65_536
"""Bits a number built by ``*`` or ``**`` may have (about 19,700 digits)."""
MAX_JSON_INDENT = 32
LOOP_FILTER = "convengine:guarded_loop"
TIMEOUT, TOO_LARGE = "TemplateTimeout", "TemplateTooLarge"

T = TypeVar("T")
_Sized = str | bytes | list[object] | tuple[object, ...]


class TemplateBudgetError(Exception):
    """A render went over its budget; ``kind`` is ``TemplateTimeout`` or ``TemplateTooLarge``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class Budget:
    timeout_ms: float
    max_chars: int
    deadline: float = math.inf

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"took longer than {self.timeout_ms:g} ms to render "
                                      "(settings.template_timeout_ms)", TIMEOUT)

    def fits(self, size: int, what: str) -> None:
        if size > self.max_chars:
            raise TemplateBudgetError(f"would build {what} of {size} characters, over the limit of "
                                      f"{self.max_chars} (settings.template_max_output_chars)", TOO_LARGE)


_BUDGET: ContextVar[Budget | None] = ContextVar("convengine_template_budget", default=None)
_UNTIMED = Budget(math.inf, 200_000)
"""Outside a render (Jinja folding constants while compiling): sizes are still checked."""


def budget() -> Budget:
    return _BUDGET.get() or _UNTIMED


@contextmanager
def budget_for(timeout_ms: float, max_chars: int) -> Iterator[Budget]:
    """Run a render under a fresh budget that ends ``timeout_ms`` from now."""
    current = Budget(timeout_ms, max_chars, time.monotonic() + timeout_ms / 1000)
    token = _BUDGET.set(current)
    try:
        yield current
    finally:
        _BUDGET.reset(token)


# --- sizes ----------------------------------------------------------------------------------


def _size(value: object) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else None


def check_size(value: T, what: str) -> T:
    size = _size(value)
    if size is not None:
        budget().fits(size, what)
    return value


def serialised_size(value: object, limit: int) -> int:
    """About how many characters ``value`` takes as JSON or ``str()`` (never fewer), counted without
    building it and stopping once past ``limit``: a list holding one list N times is N*N long."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, Mapping):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            total += 5
        elif isinstance(item, int):
            total += item.bit_length() * 10 // 33 + 2
        else:
            total += 32
    return total


def check_serialised(value: T, what: str) -> T:
    """Refuse a list or mapping whose text would be over budget, before it is written."""
    if isinstance(value, (list, tuple, set, frozenset, Mapping)):
        current = budget()
        current.fits(serialised_size(value, current.max_chars), what)
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int)


def _is_seq(value: object) -> TypeGuard[_Sized]:
    return isinstance(value, (str, bytes, list, tuple))


def _check_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateBudgetError(f"would build a number of about {bits} bits, over the limit of "
                                  f"{MAX_INT_BITS}", TOO_LARGE)


def _check_ints(values: Iterable[object], what: str) -> None:
    limit = budget().max_chars
    for value in values:
        if _is_int(value) and not isinstance(value, bool) and value > limit:
            raise TemplateBudgetError(f"{what} is {value}, over the limit of {limit} "
                                      "(settings.template_max_output_chars)", TOO_LARGE)


def check_binop(operator: str, left: object, right: object) -> None:
    """Refuse ``*``, ``+``, ``**`` and ``%`` whose result would be over budget, before computing it."""
    if operator == "*":
        _check_product(left, right)
    elif operator == "+" and _is_seq(left) and _is_seq(right):
        budget().fits(len(left) + len(right), "a joined value")
    elif operator == "**" and _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
        _check_bits(left.bit_length() * right)
    elif operator == "%" and isinstance(left, str):
        check_printf(left, right)


def _check_product(left: object, right: object) -> None:
    if _is_int(left) and _is_int(right):
        _check_bits(left.bit_length() + right.bit_length())
        return
    sequence, count = (left, right) if _is_int(right) else (right, left)
    if _is_seq(sequence) and _is_int(count):
        budget().fits(len(sequence) * max(count, 0), "a repeated value")


_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def _check_widths(numbers: Iterable[str], what: str) -> None:
    current = budget()
    for number in numbers:
        current.fits(int(number) if len(number) < 10 else current.max_chars + 1, what)


def check_printf(fmt: str, args: object) -> None:
    """Widths and precisions of a ``%`` format, literal or taken from ``args`` (``%*d``)."""
    specs = [group for match in _PRINTF.finditer(fmt) for group in match.groups() if group]
    _check_widths([s for s in specs if s != "*"], "a formatted field")
    if "*" in specs:
        _check_ints(args if isinstance(args, tuple) else (args,), "a formatted field")


def check_format(fmt: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> None:
    """Widths and precisions of a ``str.format`` template, literal or nested (``{:{w}}``)."""
    try:
        specs = [spec for _, _, spec, _ in string.Formatter().parse(fmt) if spec]
    except ValueError:
        return  # the real format() reports the malformed template
    _check_widths([n for spec in specs for n in _DIGITS.findall(spec)], "a formatted field")
    if any("{" in spec for spec in specs):
        _check_ints([*args, *kwargs.values()], "a formatted field")


# --- calls and filters ----------------------------------------------------------------------


def _arg(args: tuple[object, ...], kwargs: Mapping[str, object], index: int, name: str, default: object = 0) -> object:
    return args[index] if len(args) > index else kwargs.get(name, default)


def replaced_size(text: object, old: object, new: object, count: object = -1) -> int:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0
    hits = text.count(old) if old else len(text) + 1
    if _is_int(count) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(len(new) - len(old), 0)


def joined_size(separator: object, items: list[object]) -> int:
    sep = len(separator) if isinstance(separator, str) else 0
    limit = budget().max_chars
    total = sep * max(len(items) - 1, 0)
    for item in items:
        total += len(item) if isinstance(item, str) else serialised_size(item, limit)
        if total > limit:
            break
    return total


def translated_size(text: str, table: object) -> int:
    if not isinstance(table, Mapping):
        return len(text)
    longest = max((len(v) if isinstance(v, str) else 1 for v in table.values()), default=1)
    return len(text) * max(longest, 1)


def wrapped_size(text: str, width: object, wrapstring: object) -> int:
    wrap = len(wrapstring) if isinstance(wrapstring, str) else 1
    lines = len(text) // max(width if _is_int(width) else 79, 1) + text.count(" ") + text.count("\n") + 1
    return len(text) + wrap * lines


def _width(value: object) -> int:
    return value if _is_int(value) else len(value) if isinstance(value, str) else 0


_STR_METHODS: dict[str, Callable[[str, tuple[object, ...], Mapping[str, object]], int]] = {
    "ljust": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width"))),
    "rjust": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width"))),
    "center": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width"))),
    "zfill": lambda s, a, k: max(len(s), _width(_arg(a, k, 0, "width"))),
    "expandtabs": lambda s, a, k: len(s) + _width(_arg(a, k, 0, "tabsize", 8)) * s.count("\t"),
    "replace": lambda s, a, k: replaced_size(s, _arg(a, k, 0, "old", ""), _arg(a, k, 1, "new", ""),
                                             _arg(a, k, 2, "count", -1)),
    "translate": lambda s, a, k: translated_size(s, _arg(a, k, 0, "table", {})),
}


def check_call(obj: object, args: tuple[object, ...], kwargs: Mapping[str, object]) -> tuple[object, ...]:
    """Refuse a ``str`` method call whose result would be over budget; returns the args to call with."""
    owner = getattr(obj, "__self__", None)
    if not isinstance(owner, str):
        return args
    name = getattr(obj, "__name__", "")
    if name == "join" and args:
        items = list(cast("Iterable[object]", args[0]))  # what str.join accepts; list() raises as join would
        budget().fits(joined_size(owner, items), "a joined value")
        return (items, *args[1:])
    if name in _STR_METHODS:
        budget().fits(_STR_METHODS[name](owner, args, kwargs), f"the result of str.{name}()")
    return args


_COUNT_FILTERS = frozenset({"batch", "slice"})
"""Filters whose integer arguments are counts of things they build."""


def _filter_precheck(name: str, value: object, args: tuple[object, ...], kwargs: Mapping[str, object]) -> tuple[object, ...]:
    current = budget()
    if name in _COUNT_FILTERS:
        _check_ints([*args, *kwargs.values()], f"an argument of |{name}")
    if name == "center" and isinstance(value, str):
        current.fits(max(len(value), _width(_arg(args, kwargs, 0, "width", 80))), "the result of |center")
    elif name == "indent" and isinstance(value, str):
        lines = value.count("\n") + 1
        current.fits(len(value) + _width(_arg(args, kwargs, 0, "width", 4)) * lines, "the result of |indent")
    elif name == "replace":
        current.fits(replaced_size(str(value), *args[:3]), "the result of |replace")
    elif name == "format" and isinstance(value, str):
        check_printf(value, args)
    elif name == "tojson" and _width(_arg(args, kwargs, 0, "indent", 0)) > MAX_JSON_INDENT:
        raise TemplateBudgetError(f"|tojson indent is over {MAX_JSON_INDENT}", TOO_LARGE)
    elif name in ("tojson", "string", "pprint"):
        check_serialised(value, f"the result of |{name}")
    elif name == "wordwrap" and isinstance(value, str):
        current.fits(wrapped_size(value, _arg(args, kwargs, 0, "width", 79), _arg(args, kwargs, 2, "wrapstring", "\n")),
                     "the result of |wordwrap")
    elif name == "join" and isinstance(value, Iterable) and not isinstance(value, (str, dict)):
        items = list(value)
        current.fits(joined_size(_arg(args, kwargs, 0, "d", ""), items), "the result of |join")
        return (items,)
    return (value,)


def guard_filter(name: str, func: Callable[..., object]) -> Callable[..., object]:
    """``func`` with the budget checked before (arguments) and after (result size)."""
    passed = 1 if getattr(func, "jinja_pass_arg", None) else 0

    @functools.wraps(func)
    def guarded(*args: object, **kwargs: object) -> object:
        budget().tick()
        if len(args) > passed:
            value = _filter_precheck(name, args[passed], args[passed + 1:], kwargs)
            args = (*args[:passed], *value, *args[passed + 1:])
        return check_size(func(*args, **kwargs), f"the result of |{name}")

    return guarded


@pass_context
def guarded_loop(context: Context, iterable: Iterable[T]) -> Iterator[T]:
    """What every ``{% for %}`` iterates through: the deadline is checked at each step."""
    current = budget()
    for item in iterable:
        current.tick()
        yield item


def bounded_range(*args: int) -> range:
    numbers = range(*args)
    try:
        count = len(numbers)
    except OverflowError:
        count = RANGE_LIMIT + 1
    if count > RANGE_LIMIT:
        raise TemplateBudgetError(f"range() of {count} numbers is over the limit of {RANGE_LIMIT}", TOO_LARGE)
    return numbers


def checked_concat(parts: Iterable[str]) -> str:
    """Joins the output of a block, macro or captured ``{% set %}``, within the size budget."""
    pieces = list(parts)
    budget().fits(sum(len(p) for p in pieces), "a block's output")
    return "".join(pieces)


# --- the environment ------------------------------------------------------------------------


class GuardedCodeGenerator(CodeGenerator):
    """Makes every ``{% for %}`` iterate through :func:`guarded_loop` and checks ``~`` joins."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in list(node.find_all(nodes.For)):
            if not (isinstance(loop.iter, nodes.Filter) and loop.iter.name == LOOP_FILTER):
                loop.iter = nodes.Filter(loop.iter, LOOP_FILTER, [], [], None, None, lineno=loop.iter.lineno)
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_text(")
        super().visit_Concat(node, frame)
        self.write(")")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, bounded by the current :class:`Budget` (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = GuardedCodeGenerator

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)
        self.globals["range"] = bounded_range
        self.filters = {name: guard_filter(name, func) for name, func in self.filters.items()}
        self.filters[LOOP_FILTER] = guarded_loop
        # jinja2 declares concat as a method; each sandbox swaps in a size-checked one
        self.concat = checked_concat  # type: ignore[method-assign]

    def getattr(self, obj: object, attribute: str) -> object:
        """``order.items`` is the ``items`` key of a mapping that has one, as in ConvEngine's templates,
        not the dict's method (Jinja tries attributes first, which would print a method's repr)."""
        if isinstance(obj, Mapping) and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def call_binop(self, context: Context, operator: str, left: object, right: object) -> object:
        budget().tick()
        check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(self, context: Context, obj: object, /, *args: object, **kwargs: object) -> object:
        budget().tick()
        args = check_call(obj, args, kwargs)
        return check_size(super().call(context, obj, *args, **kwargs), "a call's result")

    def wrap_str_format(self, value: object) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt = getattr(value, "__self__", None)  # jinja wraps only a str's bound format and format_map
        if not isinstance(fmt, str):
            return None
        is_map = getattr(value, "__name__", "") == "format_map"

        def checked(*args: object, **kwargs: object) -> str:
            named = args[0] if is_map and args and isinstance(args[0], Mapping) else {}
            check_format(fmt, args, {**kwargs, **named})
            return check_size(wrapper(*args, **kwargs), "a formatted value")

        return checked

    @staticmethod
    def checked_text(value: T) -> T:
        return check_size(value, "a joined value")
