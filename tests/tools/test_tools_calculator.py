"""The calculator and the python tool as functions (in this process): values, refusals, big-number
guards. What they do behind the sandbox's walls is tests/tools/test_tools_sandbox.py."""

from __future__ import annotations

import pytest

from workbench.tools import ToolError, ToolFailure
from workbench.tools.calculator import MAX_BITS, calculator
from workbench.tools.guard import Refused
from workbench.tools.python_tool import python, run_program


@pytest.mark.parametrize("expression,text", [
    ("37*48", "1776"), ("  37 * 48 ", "1776"), ("8/2", "4"), ("7/2", "3.5"), ("7//2", "3"), ("-7 % 3", "2"),
    ("2**10", "1024"), ("2**-1", "0.5"), ("sqrt(16)", "4"), ("factorial(10)", "3628800"), ("comb(10, 3)", "120"),
    ("gcd(84, 36)", "12"), ("max(1, 5, 3)", "5"), ("round(pi, 3)", "3.142"), ("(1+2)*(3+4)", "21"),
    ("1e300*1e300", "inf"), ("2**0.5", "1.4142135623730951"),
])
def test_values(expression, text):
    assert calculator({"expression": expression}) == text


def test_a_large_integer_is_printed_in_full():
    text = calculator({"expression": "3**50000"})
    assert len(text) == 23857 and text.startswith("1") and text.endswith("1")  # 3**50000 = ...001 in base 10


@pytest.mark.parametrize("expression", [
    "2**10**10", "10**100000", "(2**60000)*(2**60000)", "factorial(100000)", "comb(10**9, 5)",
    f"2**{MAX_BITS + 1}",
])
def test_big_numbers_are_refused_before_they_are_computed(expression):
    with pytest.raises(ToolError):
        calculator({"expression": expression})


@pytest.mark.parametrize("expression", [
    "__import__('os')", "x", "'a' * 3", "(1).real", "[1, 2]", "1 < 2", "lambda: 1", "open('f')", "abs(x=1)",
    "1 << 100",
])
def test_anything_but_arithmetic_is_refused(expression):
    with pytest.raises(ToolError, match="not allowed"):
        calculator({"expression": expression})


@pytest.mark.parametrize("expression,error", [("1/0", "ZeroDivisionError"), ("sqrt(-1)", "ValueError"),
                                              ("factorial(2.5)", "factorial")])
def test_arithmetic_errors(expression, error):
    with pytest.raises(ToolError, match=error):
        calculator({"expression": expression})


def test_bad_arguments():
    with pytest.raises(SyntaxError):
        calculator({"expression": "1 +"})
    with pytest.raises(ToolError, match="'expression' must be a string"):
        calculator({"expr": "1"})
    with pytest.raises(ToolError, match="characters"):
        calculator({"expression": "1+" * 2000 + "1"})


def test_python_program_output_and_last_value():
    assert python({"code": "from fractions import Fraction\nFraction(1, 3) + Fraction(1, 6)"}) == "Fraction(1, 2)"
    assert python({"code": "import math\nprint(math.factorial(5))\nx = 2"}) == "120\n"
    assert python({"code": "import statistics\nstatistics.mean([1, 2, 3, 4])"}) == "2.5"


@pytest.mark.parametrize("code", ["import os", "import subprocess", "from socket import socket", "().__class__",
                                  "x = 1\nx.__class__.__bases__", "_secret = 1", "import math as _m"])
def test_python_refuses_escapes(code):
    with pytest.raises(Refused):
        run_program(code, 1000)


def test_python_program_errors():
    with pytest.raises(ToolFailure) as info:
        run_program("print('before')\n1/0", 1000)
    assert (info.value.kind, info.value.text) == ("raised", "before\nZeroDivisionError: division by zero")
    with pytest.raises(ToolFailure) as info:
        run_program("open('/etc/passwd')", 1000)
    assert "NameError" in info.value.text
    with pytest.raises(ToolFailure) as info:
        run_program("try:\n    print('x' * 5000)\nexcept Exception:\n    pass", 1000)
    assert info.value.kind == "output" and info.value.text.startswith("x" * 1000)
    with pytest.raises(SyntaxError):
        run_program("def f(:", 1000)
