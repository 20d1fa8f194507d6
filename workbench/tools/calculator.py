"""The calculator tool: one arithmetic expression, evaluated over an AST allow-list (the tool that
rStar2-Agent and ToRL train with, cut down to arithmetic).

    calculator({"expression": "37*48"})        -> "1776"
    calculator({"expression": "sqrt(2)**2"})   -> "2.0000000000000004"
    calculator({"expression": "2**10**10"})    -> ToolError: the result would have ~3e9 bits

1. Allowed: int and float literals; + - * / // % ** and unary + -; parentheses; the names `pi`, `e`,
   `tau`; calls of the functions in `FUNCTIONS` (sqrt, log, exp, sin, ..., factorial, comb, gcd, abs,
   round, min, max). Anything else (a name, an attribute, a string, a comparison, a lambda) is refused
   before anything runs.
2. Big numbers are refused before they are computed: a power, product or factorial whose result would
   have more than `MAX_BITS` bits raises ToolError, so `2**10**10` costs microseconds, not the
   sandbox's CPU limit. (The CPU limit still stands behind it.)
3. It is pure (no call can bind a name, set an attribute or import), so warm worker processes serve
   its calls, many each, instead of a fresh child per call (docs/tools.md).
4. A float that is a whole number below 2**53 prints as an integer ("8/2" -> "4"), so the organism's
   integer answers read the same whichever operator reached them.
"""

from __future__ import annotations

import ast
import math
import operator
import sys
from typing import Any, Callable

from workbench.tools.base import ToolError, register_tool

MAX_BITS = 100_000
"""The largest integer result (or intermediate) the calculator computes, in bits (~30,000 digits)."""

MAX_EXPRESSION_CHARS = 2000
"""The longest expression accepted."""

CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _factorial(n: Any) -> int:
    if not isinstance(n, int) or n < 0:
        raise ToolError("factorial: needs a non-negative integer")
    if n > 5000:  # 5000! has ~54,000 bits
        raise ToolError(f"factorial({n}) is too large (at most factorial(5000))")
    return math.factorial(n)


def _comb(n: Any, k: Any) -> int:
    if not (isinstance(n, int) and isinstance(k, int)) or n > 20000:
        raise ToolError("comb: needs integers n <= 20000 and k")
    return math.comb(n, k)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "log": math.log, "log2": math.log2, "log10": math.log10, "exp": math.exp,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "floor": math.floor, "ceil": math.ceil, "factorial": _factorial, "comb": _comb,
    "gcd": math.gcd, "lcm": math.lcm, "abs": abs, "round": round, "min": min, "max": max,
}
"""The functions an expression may call."""


def _bits(x: Any) -> float:
    return float(abs(x).bit_length()) if isinstance(x, int) else 0.0


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if b * math.log2(abs(a)) > MAX_BITS:
            raise ToolError(f"the result would have ~{b * math.log2(abs(a)):.3g} bits (at most {MAX_BITS})")
    return a**b


def _mul(a: Any, b: Any) -> Any:
    if _bits(a) + _bits(b) > MAX_BITS:
        raise ToolError(f"the product would have more than {MAX_BITS} bits")
    return a * b


BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: _pow,
}
UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> Any:
    """The value of `expression` (SyntaxError when it does not parse, ToolError when it uses
    something not allowed or its value would be too large)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression has {len(expression)} characters (at most {MAX_EXPRESSION_CHARS})")
    tree = ast.parse(expression.strip(), mode="eval")
    return _eval(tree.body)


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        return BINARY[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in CONSTANTS:
        return CONSTANTS[node.id]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
            and not node.keywords):
        return FUNCTIONS[node.func.id](*[_eval(arg) for arg in node.args])
    what = type(node).__name__
    if isinstance(node, ast.Name):
        what = f"the name {node.id!r}"
    elif isinstance(node, ast.Call):
        what = "a call of something other than " + ", ".join(FUNCTIONS)
    raise ToolError(f"not allowed in a calculator expression: {what}")


def format_value(value: Any) -> str:
    """The text the model reads for a value: ints in full, whole floats below 2**53 as ints."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, int) and value.bit_length() > 10_000:  # past Python's 4300-digit guard, within MAX_BITS
        old = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            return str(value)
        finally:
            sys.set_int_max_str_digits(old)
    return repr(value) if isinstance(value, float) else str(value)


@register_tool("calculator", description="Evaluate one arithmetic expression (+ - * / // % **, sqrt, log, "
               "exp, sin, cos, factorial, comb, gcd, pi, e).",
               parameters={"expression": "the expression, e.g. 37*48"}, main_argument="expression", pure=True)
def calculator(arguments: dict[str, Any]) -> str:
    """The calculator tool: `{"expression": "37*48"}` -> "1776"."""
    expression = arguments.get("expression")
    if not isinstance(expression, str):
        raise ToolError("calculator: the argument 'expression' must be a string")
    try:
        value = evaluate(expression)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None
    return format_value(value)
