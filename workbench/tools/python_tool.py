"""The python tool: a short Python program over the safe arithmetic modules, its printed output and
the value of its last expression as the result (as ToRL and rStar2-Agent's code tool return them,
cut down).

    python({"code": "from fractions import Fraction\\nFraction(1, 3) + Fraction(1, 6)"})  -> "1/2"
    python({"code": "print(sum(range(10)))"})                                            -> "45"

1. The program is parsed first and refused (kind "refused") when it names anything starting with an
   underscore (`__class__`, `__import__`, `_x`): the usual ways out of a restricted namespace.
2. It runs with a small set of builtins (`SAFE_BUILTINS`: no open, eval, exec, input, globals) and an
   `__import__` that allows only `guard.SAFE_MODULES`.
3. Its printed output is kept up to the call's `max_output_chars`; more stops the program with
   kind "output". The text is the output, then the last expression's value (`repr` unless None). An
   exception of the program gives kind "raised" and the text: its output, then "TypeError: ...".
4. The sandbox's walls (guard.py) stand behind all of this: limits on CPU, memory, files and
   processes, no network, and an audit hook.
"""

from __future__ import annotations

import ast
import builtins
import sys
from typing import Any

from workbench.tools.base import ToolError, ToolFailure, call_limits, register_tool
from workbench.tools.guard import SAFE_MODULES, Refused

MAX_CODE_CHARS = 20_000

SAFE_BUILTINS = ("abs", "all", "any", "bin", "bool", "chr", "complex", "dict", "divmod", "enumerate", "filter",
                 "float", "format", "frozenset", "hex", "int", "isinstance", "len", "list", "map", "max", "min",
                 "next", "oct", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice",
                 "sorted", "str", "sum", "tuple", "zip", "True", "False", "None", "Exception", "ValueError",
                 "TypeError", "ZeroDivisionError", "ArithmeticError", "OverflowError", "IndexError", "KeyError",
                 "StopIteration", "AssertionError", "NotImplementedError", "RuntimeError")


class OutputLimit(BaseException):
    """The program printed more than the sandbox reads."""


class BoundedOutput:
    """A text stream keeping at most `limit` characters; more raises OutputLimit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        if self.size + len(text) > self.limit:
            self.parts.append(text[: self.limit - self.size])
            self.size = self.limit
            raise OutputLimit(f"the program printed more than {self.limit} characters")
        self.parts.append(text)
        self.size += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def getvalue(self) -> str:
        return "".join(self.parts)


def _safe_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    if level != 0 or name.partition(".")[0] not in SAFE_MODULES:
        raise Refused(f"import of {name!r} is not allowed (allowed: {', '.join(SAFE_MODULES)})")
    return builtins.__import__(name, globals, locals, fromlist, level)


def check_names(tree: ast.AST) -> None:
    """Refuse a program that names anything starting with an underscore."""
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.alias):
            name = node.name.rpartition(".")[2] if node.asname is None else node.asname
        if name is not None and name.startswith("_"):
            raise Refused(f"the name {name!r} is not allowed (names starting with '_')")


def run_program(code: str, output_limit: int) -> str:
    """Run `code` and return its output and last value (module docstring)."""
    if len(code) > MAX_CODE_CHARS:
        raise ToolError(f"the program has {len(code)} characters (at most {MAX_CODE_CHARS})")
    tree = ast.parse(code, mode="exec")
    check_names(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    namespace: dict[str, Any] = {"__builtins__": {n: getattr(builtins, n) for n in SAFE_BUILTINS}}
    namespace["__builtins__"]["__import__"] = _safe_import
    out = BoundedOutput(output_limit)
    old, sys.stdout = sys.stdout, out  # type: ignore[assignment]
    try:
        exec(compile(tree, "<tool>", "exec"), namespace)
        value = eval(compile(last, "<tool>", "eval"), namespace) if last is not None else None
        if value is not None:
            out.write(repr(value))
    except OutputLimit as exc:
        raise ToolFailure("output", out.getvalue() + f"\n[{exc}]") from None
    except (ToolFailure, Refused, MemoryError, SyntaxError):
        raise
    except Exception as exc:  # the program's own error: what it printed, then the error, as a REPL shows it
        raise ToolFailure("raised", out.getvalue() + f"{type(exc).__name__}: {exc}") from None
    finally:
        sys.stdout = old
    return out.getvalue()


@register_tool("python", description="Run a short Python program (math, fractions, decimal, statistics, "
               "itertools, ...); returns what it prints and the value of its last expression.",
               parameters={"code": "the program"}, main_argument="code")
def python(arguments: dict[str, Any]) -> str:
    """The python tool: `{"code": "..."}` -> its output."""
    code = arguments.get("code")
    if not isinstance(code, str):
        raise ToolError("python: the argument 'code' must be a string")
    return run_program(code, call_limits().max_output_chars)
