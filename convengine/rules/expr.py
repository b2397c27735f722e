"""A tiny, safe expression language for edge conditions and ``set`` nodes.

Expressions use Python's syntax, parsed with :mod:`ast` and evaluated by walking an allow-list of
node types: literals, names, ``a.b`` / ``a["b"]`` lookups in mappings and lists, comparisons
(``== != < <= > >= in not in``), ``and or not``, ``+ - * / %`` on numbers (``+`` also joins
texts, within a size limit) and a few functions (:data:`FUNCTIONS`). Nothing is ever passed to
``eval``; attribute access reads mapping keys only, so no Python object is reachable.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from convengine._internal import numbers
from convengine._internal.textmatch import compile_regex

MAX_SOURCE_CHARS = 1000
MAX_NODES = 200
MAX_TEXT_CHARS = 10_000


class ExpressionError(ValueError):
    """An expression that does not parse, uses something not allowed, or fails to evaluate."""


def _matches(text: object, pattern: object) -> bool:
    return compile_regex(str(pattern)).search(str(text)) is not None


def _number(value: object) -> float | int:
    """A finite number: ``nan``, ``inf``, ``infinity`` (any sign and case) and values past the float
    range (``1e999``) are refused, since NaN makes every comparison false and would skip a limit."""
    if isinstance(value, bool):
        raise ExpressionError("number() of a boolean")
    if isinstance(value, int):
        return whole(value)
    if isinstance(value, float):
        return finite(value)
    text = str(value).strip().replace(",", "")
    try:
        return whole(int(text))
    except ValueError as exc:
        if isinstance(exc, ExpressionError):
            raise
        return finite(float(text), text)


def whole(value: int) -> int:
    """``value`` if it is within the 64-bit range (what a checkpoint holds); ExpressionError otherwise."""
    if not numbers.in_range(value):
        raise ExpressionError(f"{numbers.shown(value)} is past {numbers.RANGE_TEXT}")
    return value


def finite(value: float, shown: object = None) -> float:
    """``value`` if it is a finite float; ExpressionError naming it otherwise."""
    if not math.isfinite(value):
        raise ExpressionError(f"{str(value if shown is None else shown)[:40]!r} is not a finite number")
    return value


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": lambda v: len(v) if isinstance(v, (str, list, dict)) else 0,
    "lower": lambda v: str(v).lower(),
    "upper": lambda v: str(v).upper(),
    "number": _number,
    "text": lambda v: "" if v is None else str(v),
    "contains": lambda a, b: str(b).lower() in str(a).lower(),
    "matches": _matches,
    "empty": lambda v: v in (None, "", [], {}),
}
CONSTANTS = {"true": True, "false": False, "null": None, "none": None}

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b if isinstance(b, (str, list, dict, tuple)) else False,
    ast.NotIn: lambda a, b: a not in b if isinstance(b, (str, list, dict, tuple)) else True,
}
_ARITH: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


@dataclass(frozen=True, slots=True)
class Expression:
    """A parsed expression; :meth:`evaluate` it against named scopes."""

    source: str
    tree: ast.expr

    def evaluate(self, scopes: Mapping[str, Any]) -> Any:
        try:
            return _eval(self.tree, scopes)
        except ExpressionError:
            raise
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise ExpressionError(f"{type(exc).__name__}: {exc}") from None

    def truth(self, scopes: Mapping[str, Any]) -> bool:
        return bool(self.evaluate(scopes))


def compile_expression(source: str) -> Expression:
    """Parse ``source``; raises ExpressionError naming what is not allowed."""
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("expression is empty")
    if len(source) > MAX_SOURCE_CHARS:
        raise ExpressionError(f"expression is {len(source)} characters; the limit is {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"does not parse: {exc.msg}") from None
    count = 0
    for node in ast.walk(tree):
        count += 1
        _check(node)
    if count > MAX_NODES:
        raise ExpressionError(f"expression is too complex ({count} parts; the limit is {MAX_NODES})")
    return Expression(source, tree)


_ALLOWED = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Compare, ast.Name,
            ast.Load, ast.Attribute, ast.Subscript, ast.Constant, ast.List, ast.Tuple, ast.Call,
            *_COMPARE, *_ARITH)


def _check(node: ast.AST) -> None:
    if not isinstance(node, _ALLOWED):
        raise ExpressionError(f"{type(node).__name__} is not allowed in a flow expression")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise ExpressionError(f"names starting with '_' are not allowed ({node.attr})")
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        raise ExpressionError(f"names starting with '_' are not allowed ({node.id})")
    if isinstance(node, ast.Constant) and isinstance(node.value, (float, complex)):
        if isinstance(node.value, complex):
            raise ExpressionError("complex numbers are not allowed in a flow expression")
        finite(node.value, "a literal past the float range")
    if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS
                                       or node.keywords):
        raise ExpressionError(f"only these functions may be called: {', '.join(sorted(FUNCTIONS))}")


def _eval(node: ast.expr, scopes: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in scopes:
            return scopes[node.id]
        return CONSTANTS.get(node.id.lower())
    if isinstance(node, ast.Attribute):
        return _lookup(_eval(node.value, scopes), node.attr)
    if isinstance(node, ast.Subscript):
        return _lookup(_eval(node.value, scopes), _eval(node.slice, scopes))
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, scopes) for e in node.elts]
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, scopes)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, scopes)
        if isinstance(node.op, ast.Not):
            return not value
        negated = -_number(value)
        return whole(negated) if isinstance(negated, int) else negated
    if isinstance(node, ast.Compare):
        return _compare(node, scopes)
    if isinstance(node, ast.BinOp):
        return _arith(node, scopes)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return FUNCTIONS[node.func.id](*[_eval(a, scopes) for a in node.args])
    raise ExpressionError(f"{type(node).__name__} is not allowed")


def _lookup(container: object, key: object) -> Any:
    if isinstance(container, Mapping):
        return container.get(key)
    if isinstance(container, list) and isinstance(key, int) and -len(container) <= key < len(container):
        return container[key]
    return None


def _bool_op(node: ast.BoolOp, scopes: Mapping[str, Any]) -> Any:
    value: Any = None
    for operand in node.values:
        value = _eval(operand, scopes)
        if isinstance(node.op, ast.And) and not value:
            return value
        if isinstance(node.op, ast.Or) and value:
            return value
    return value


def _compare(node: ast.Compare, scopes: Mapping[str, Any]) -> bool:
    left = _checked(_eval(node.left, scopes))
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = _checked(_eval(right_node, scopes))
        try:
            ok = _COMPARE[type(op)](left, right)
        except TypeError:
            ok = False  # None < 3 is simply false
        if not ok:
            return False
        left = right
    return True


def _arith(node: ast.BinOp, scopes: Mapping[str, Any]) -> Any:
    left, right = _eval(node.left, scopes), _eval(node.right, scopes)
    if isinstance(node.op, ast.Add) and (isinstance(left, str) or isinstance(right, str)):
        joined = f"{'' if left is None else left}{'' if right is None else right}"
        if len(joined) > MAX_TEXT_CHARS:
            raise ExpressionError(f"text longer than {MAX_TEXT_CHARS} characters")
        return joined
    result = _ARITH[type(node.op)](_number(left), _number(right))  # 64-bit operands: a product stays small
    if isinstance(result, float):
        return finite(result, f"{left!r} {type(node.op).__name__} {right!r}")
    return whole(result)


def _checked(value: object) -> object:
    """A compared value: a NaN or infinite float (from a tool result, a python node, stored data) is
    an error rather than a comparison that is silently false."""
    return finite(value) if isinstance(value, float) else value
