"""Verifiers: equivalent and non-equivalent answers, user verifiers, errors and timeouts."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest

from workbench.errors import ConfigError
from workbench.tasks import Verifier, verify
from workbench.tasks.verifiers import call_with_timeout, VerifierTimeout

MATH_EQUIVALENT = [
    ("42", "42"),
    ("The answer is 42.", "42"),
    ("so she makes 9 * 2 = 18 dollars\n#### 18", "18"),
    ("#### 1,000", "1000"),
    ("x = 1,234,567", "1234567"),
    ("$1,000", "1000"),
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{2}{4}"),
    ("A: 3/4", "0.75"),
    ("Answer: -7", "-7"),
    ("the final answer is 12.0", "12"),
    ("\\boxed{0.25}", "1/4"),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac34"),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2"),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}"),
    ("\\boxed{(1,2)}", "(1,2)"),
    ("\\boxed{x=3}", "3"),
    ("Thus \\boxed{5}. Earlier I wrote 7.", "5"),
    ("steps 3, 4 and finally 10", "10"),
    ("The solution: \\boxed{10\\%}", "10\\%"),
    ("\\boxed{\\frac{\\pi}{2}}", "\\pi/2"),
    ("#### 5", "The total is 2+3 = 5\n#### 5"),
    ("\\boxed{-\\frac{1}{3}}", "-1/3"),
]
MATH_DIFFERENT = [
    ("41", "42"),
    ("The answer is 43.", "42"),
    ("#### 1,001", "1000"),
    ("\\boxed{\\frac{1}{3}}", "0.5"),
    ("A: 3/5", "0.75"),
    ("Answer: 7", "-7"),
    ("\\boxed{\\pi}", "3.14"),
    ("\\boxed{\\sqrt{3}}", "\\sqrt{2}"),
    ("\\boxed{x^2+1}", "(x+1)^2"),
    ("\\boxed{(2,1)}", "(1,2)"),
    ("Thus \\boxed{7}. Earlier I wrote 5.", "5"),
    ("first 10 then finally 3", "10"),
    ("1,00", "100"),
    ("\\boxed{12}", "The total is 2+3 = 5\n#### 5"),
    ("\\boxed{-\\frac{1}{3}}", "1/3"),
]


@pytest.mark.parametrize("response, reference", MATH_EQUIVALENT)
def test_math_equivalent(response, reference):
    result = verify(response, reference, "math")
    assert (result.reward, result.verdict) == (1.0, "correct")


@pytest.mark.parametrize("response, reference", MATH_DIFFERENT)
def test_math_not_equivalent(response, reference):
    result = verify(response, reference, "math")
    assert (result.reward, result.verdict) == (0.0, "wrong")


@pytest.mark.parametrize("response", ["", "   ", "I do not know how to solve this problem at all, sorry about that."])
def test_math_no_answer(response):
    assert verify(response, "5", "math").verdict == "no_answer"


EXACT = [
    ("42", "42", 1.0),
    (" 42\n", "42", 1.0),
    ("Paris.", "paris", 1.0),
    ("New   York", "new york", 1.0),
    ("421", "42", 0.0),
    ("4 2", "42", 0.0),
    ("42.0", "42", 0.0),
    ("-42", "42", 0.0),
]


@pytest.mark.parametrize("response, reference, reward", EXACT)
def test_exact(response, reference, reward):
    assert verify(response, reference, "exact").reward == reward


def test_exact_is_fast():
    v = Verifier("exact")
    pairs = [(str(i), str(i + (i % 3 == 0))) for i in range(20_000)]
    start = time.perf_counter()
    rewards = [v(r, ref).reward for r, ref in pairs]
    elapsed = time.perf_counter() - start
    assert sum(rewards) == sum(1 for i in range(20_000) if i % 3)
    assert elapsed < 1.0, f"20k exact verifications took {elapsed:.2f} s (engine needs ~2,000/s)"


USER_MODULE = textwrap.dedent(
    """
    import time

    def exact_bool(response, reference):
        return response.strip() == reference

    def half_credit(response, reference):
        return 0.5 if reference in response else 0.0

    def with_prompt(response, reference, prompt=None):
        return prompt is not None and prompt.id == "p1" and response == reference

    def explodes(response, reference):
        raise RuntimeError("boom on " + response)

    def sleeps(response, reference):
        time.sleep(5)  # the thing under test: a verifier that outlasts its time limit
        return True

    def returns_text(response, reference):
        return "yes"

    def returns_nan(response, reference):
        return float("nan")
    """
)


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "wb_user_verifiers.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "wb_user_verifiers"


def test_user_verifier_bool_float_and_prompt(user_module):
    from workbench.tasks import Prompt

    assert verify(" 7 ", "7", f"{user_module}:exact_bool").verdict == "correct"
    assert verify("8", "7", f"{user_module}:exact_bool").verdict == "wrong"
    half = verify("it is 7", "7", f"{user_module}:half_credit")
    assert (half.reward, half.verdict) == (0.5, "correct")
    v = Verifier(f"{user_module}:with_prompt")
    assert v("7", "7", Prompt(id="p1", text="q", answer="7")).reward == 1.0
    assert v("7", "7", Prompt(id="p2", text="q", answer="7")).reward == 0.0


@pytest.mark.parametrize(
    "fn, fragment",
    [("explodes", "RuntimeError: boom on 7"), ("returns_text", "not a bool"), ("returns_nan", "not a bool")],
)
def test_user_verifier_errors_become_verdicts(user_module, fn, fragment):
    result = verify("7", "7", f"{user_module}:{fn}")
    assert result.reward == 0.0
    assert result.verdict.startswith("verifier_error: ") and fragment in result.verdict


def test_user_verifier_timeout_main_thread(user_module):
    start = time.perf_counter()
    result = verify("7", "7", f"{user_module}:sleeps", timeout_s=0.2)
    assert time.perf_counter() - start < 2.0
    assert result.reward == 0.0 and "timed out" in result.verdict


def test_user_verifier_timeout_in_worker_thread(user_module):
    out = {}
    v = Verifier(f"{user_module}:sleeps", timeout_s=0.2)
    worker = threading.Thread(target=lambda: out.update(r=v("7", "7")))
    worker.start()
    worker.join(3.0)
    assert out["r"].verdict.startswith("verifier_error: timed out")


def test_call_with_timeout_passes_results_and_errors():
    assert call_with_timeout(lambda: 3, 1.0) == 3
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, 1.0)
    with pytest.raises(VerifierTimeout):
        call_with_timeout(lambda: time.sleep(2), 0.1)  # a call that outlasts its time limit


@pytest.mark.parametrize("spec", ["fuzzy", "no_such_module_xyz:fn", "json:no_such_function"])
def test_unknown_verifier_is_a_config_error(spec):
    with pytest.raises(ConfigError, match="verifier"):
        Verifier(spec)
