"""Unit checks behind the corpus: verifications have a hard time limit (a hang inside C code too),
and data files with invalid UTF-8 or a runaway line are bad rows naming their row, not crashes."""

from __future__ import annotations

import time

import pytest

from workbench.errors import DataError
from workbench.tasks import get_task
from workbench.tasks.verifiers import MATH_WORKER, Verifier, verify_math


def test_math_verify_hang_in_c_code_is_cut_at_the_limit():
    """sympy's evalf of a power tower ignores SIGALRM; the worker process is killed instead."""
    verify_math("\\boxed{1+x}", "x+1", timeout_s=30)  # start the worker outside the timed part
    restarts = MATH_WORKER.restarts
    t0 = time.perf_counter()
    result = verify_math("\\boxed{9^{9^{9^{9^{9}}}}}", "x^2+1", timeout_s=1.0)
    took = time.perf_counter() - t0
    assert result.verdict == "verifier_error: math-verify timed out after 1 s" and result.reward == 0
    assert took < 10
    assert MATH_WORKER.restarts == restarts + 1
    assert verify_math("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", timeout_s=30).verdict == "correct"  # a fresh worker


def test_user_verifier_hang_is_cut_at_the_limit(monkeypatch, tmp_path):
    (tmp_path / "slow_verifier_mod.py").write_text("import time\ndef check(r, ref):\n    time.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t0 = time.perf_counter()
    result = Verifier("slow_verifier_mod:check", timeout_s=0.5)("x", "y")
    assert result.verdict == "verifier_error: timed out after 0.5 s"
    assert time.perf_counter() - t0 < 5


def _task(path, **kw):
    return get_task({"kind": "file", "path": str(path), **kw})


def test_invalid_utf8_and_long_lines_are_bad_rows(tmp_path):
    good = b'{"question": "1+1=", "answer": "2"}\n'
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"question": "\xff", "answer": "1"}\n' + b'{"question": "' + b"9" * 2000 + b'", "answer": "1"}\n'
                     + good * 98)
    task = _task(path, max_row_bytes=1000)
    assert len(task.train_prompts()) + len(task.eval_prompts()) == 98
    report = task.reports[0]
    assert report.bad == 2
    assert report.examples[0][0] == 1 and "not valid UTF-8" in report.examples[0][1]
    assert report.examples[1][0] == 2 and "max_row_bytes" in report.examples[1][1]
    path.write_bytes(b'{"question": "\xff", "answer": "1"}\n' + good)
    with pytest.raises(DataError, match="row 1: not valid UTF-8"):
        _task(path).train_prompts()
