"""Verifiers: turn a response and a reference answer into a reward and a verdict.

Four methods:

- "exact": equal after normalisation (surrounding whitespace, runs of whitespace, case, a trailing
  period). The organism's path: a string compare, microseconds per call.
- "math": the final answer is extracted from the response (`\\boxed{x}`, `#### x`, `Answer: x`,
  `A: x`, else the last number) and compared with the reference's: first as exact rationals
  (fast: "1,000" == "1000.0", "0.5" == "1/2"), then through `math-verify` (LaTeX, fractions, sets,
  symbolic equality) in a worker process killed when a comparison outlives the time limit.
- "number": the number a short free-text answer gives (the first after the last "=", else the last
  one; `workbench.tasks.extract.number_answer`) equal to the reference as an exact rational. For
  chat models answering a question in words ("What is 3 + 7?" -> "3 + 7 = 10.", "The answer is 10").
- "module:function": a user verifier, called as `fn(response, reference)` (or with a third keyword
  `prompt=` when it declares one), returning a bool or a float reward.

A verifier that raises or times out never crashes a run: it gives reward 0 and the verdict
`verifier_error: <reason>`, which the store keeps with the rollout.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import json
import math
import select
import signal
import subprocess
import sys
import threading
from fractions import Fraction
from typing import Any, Callable

from workbench.correctness import is_correct
from workbench.errors import ConfigError
from workbench.tasks.base import Prompt, VerifyResult
from workbench.tasks.extract import final_answer, last_boxed, number_answer

CORRECT = VerifyResult(1.0, "correct", True)
WRONG = VerifyResult(0.0, "wrong", False)
NO_ANSWER = VerifyResult(0.0, "no_answer", False)
BUILTIN_METHODS = ("exact", "math", "number")
DEFAULT_TIMEOUT_S = 5.0


class VerifierTimeout(Exception):
    """Raised inside a verifier call that ran past its timeout."""


def error_result(reason: str) -> VerifyResult:
    """Reward 0 with verdict `verifier_error: <reason>` (one line, at most 200 characters)."""
    reason = " ".join(str(reason).split())[:200] or "unknown error"
    return VerifyResult(0.0, f"verifier_error: {reason}", False)


def call_with_timeout(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """Run `fn()` and raise VerifierTimeout after `timeout_s` seconds.

    In the main thread an interval timer (SIGALRM) interrupts the call. In other threads, where
    signals cannot be used, the call runs in a daemon thread that is abandoned on timeout (its
    result is discarded; the caller continues).
    """
    if not timeout_s or timeout_s <= 0:
        return fn()
    if threading.current_thread() is threading.main_thread():
        fired = []

        def _alarm(signum, frame):  # noqa: ARG001
            fired.append(True)
            raise VerifierTimeout(f"timed out after {timeout_s:g} s")

        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            value = fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        if fired:  # the alarm fired inside code that caught it (math-verify catches Exception)
            raise VerifierTimeout(f"timed out after {timeout_s:g} s")
        return value
    box: dict[str, Any] = {}

    def _run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=_run, daemon=True, name="verifier")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise VerifierTimeout(f"timed out after {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---------------------------------------------------------------- exact


def normalize_exact(text: str) -> str:
    """Whitespace collapsed, case folded, one trailing period dropped."""
    text = " ".join(text.split()).casefold()
    return text[:-1].rstrip() if text.endswith(".") else text


def verify_exact(response: str, reference: str) -> VerifyResult:
    """Exact match after `normalize_exact`; the common case (already equal) is one compare."""
    if response == reference:
        return CORRECT if response else NO_ANSWER
    r = normalize_exact(response)
    if not r:
        return NO_ANSWER
    return CORRECT if r == normalize_exact(reference) else WRONG


# ---------------------------------------------------------------- math


def _as_rational(text: str) -> Fraction | None:
    """`text` as an exact rational when it is a plain number ("1,234", "$5", "-0.25", "3/4", "50%"
    is not), else None."""
    t = text.strip().strip("$").replace("\\$", "").replace("\\!", "")
    t = t.replace(" ", "").rstrip(".")
    if t.startswith("\\frac{") and t.count("{") == 2:
        num, _, den = t[len("\\frac{") :].partition("}{")
        t = f"{num}/{den.rstrip('}')}"
    if "," in t:
        head, *groups = t.lstrip("-").split(",")
        if not head or len(head) > 3 or any(len(g.split(".")[0]) != 3 for g in groups):
            return None
        t = t.replace(",", "")
    try:
        return Fraction(t)
    except (ValueError, ZeroDivisionError):
        return None


def _import_math_verify() -> Any:
    """math-verify, imported outside any time limit (its first import, with sympy, takes seconds; an
    import cut short by the alarm would leave half-initialised modules behind)."""
    import math_verify
    import math_verify.grader
    import math_verify.parser

    # The timeout is ours (call_with_timeout); silence math-verify's warning that its own is off.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    return math_verify


def _math_verify_equal(pred: str, ref: str) -> bool:
    """Equivalence through math-verify; both sides wrapped as LaTeX math (timeouts are ours)."""
    from math_verify import parse, verify

    def _parse(s: str):
        s = s.strip()
        wrapped = s if ("$" in s or "\\boxed" in s or "\\(" in s) else f"${s}$"
        return parse(wrapped, parsing_timeout=None) or parse(s, parsing_timeout=None)

    gold, target = _parse(ref), _parse(pred)
    if not gold or not target:
        return normalize_exact(pred) == normalize_exact(ref)
    return bool(verify(gold, target, timeout_seconds=None))


class MathWorker:
    """math-verify in a worker process, so that a time limit is a hard one.

    An alarm cannot stop sympy inside one long C call (`\\boxed{9^{9^{9^{9^{9}}}}}` sent `evalf` into a
    big-integer power that ignored SIGALRM for minutes, and would have hung the run). The worker is
    started on first use (it imports math-verify once, outside any limit), answers one comparison at
    a time over a pipe, and is killed when a comparison outlives its limit; the next call starts a
    fresh one. A round trip costs tens of microseconds next to math-verify's milliseconds, and only
    answers the exact-rational fast path cannot settle get here."""

    START_TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self.restarts = 0

    def _start(self) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from workbench.tasks.verifiers import math_worker_main; math_worker_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
            errors="replace")
        if not select.select([proc.stdout], [], [], self.START_TIMEOUT_S)[0] or proc.stdout.readline().strip() != "ready":
            proc.kill()
            proc.wait()
            raise RuntimeError("the math-verify worker did not start")
        atexit.register(_kill, proc)
        return proc

    def equal(self, pred: str, ref: str, timeout_s: float) -> bool:
        """math-verify's equivalence of `pred` and `ref`; VerifierTimeout after `timeout_s`."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                proc = self._proc = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps([pred, ref]) + "\n")
                proc.stdin.flush()
            except OSError as exc:
                self._stop()
                raise RuntimeError(f"the math-verify worker is gone ({exc})") from exc
            if not select.select([proc.stdout], [], [], timeout_s)[0]:
                self._stop()
                raise VerifierTimeout(f"timed out after {timeout_s:g} s")
            line = proc.stdout.readline()
            if not line:
                self._stop()
                raise RuntimeError("the math-verify worker exited")
            ok, error = json.loads(line)
            if error:
                raise RuntimeError(error)
            return bool(ok)

    def _stop(self) -> None:
        if self._proc is not None:
            _kill(self._proc)
            self._proc = None
            self.restarts += 1


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def math_worker_main() -> None:
    """The worker's loop: one JSON `[pred, ref]` a line in, one `[equal, error]` a line out."""
    _import_math_verify()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            pred, ref = json.loads(line)
            reply = [_math_verify_equal(pred, ref), None]
        except Exception as exc:  # noqa: BLE001 - reported to the caller as the verdict
            reply = [False, f"{type(exc).__name__}: {exc}"]
        out.write(json.dumps(reply) + "\n")
        out.flush()


MATH_WORKER = MathWorker()


def verify_math(response: str, reference: str, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> VerifyResult:
    """Math equivalence of the response's final answer and the reference's (see module docstring)."""
    pred = final_answer(response)
    if pred is None:
        return NO_ANSWER
    ref = last_boxed(reference) if "\\boxed" in reference else None
    if ref is None:
        ref = final_answer(reference) if "####" in reference else reference.strip()
    p, r = _as_rational(pred), _as_rational(ref)
    if p is not None and r is not None:
        return CORRECT if p == r else WRONG
    if normalize_exact(pred) == normalize_exact(ref):
        return CORRECT
    try:
        if timeout_s and timeout_s > 0:
            ok = MATH_WORKER.equal(pred, ref, timeout_s)
        else:
            _import_math_verify()
            ok = _math_verify_equal(pred, ref)
    except VerifierTimeout as exc:
        return error_result(f"math-verify {exc}")
    except Exception as exc:  # noqa: BLE001 - a verifier must never crash the run
        return error_result(f"math-verify {type(exc).__name__}: {exc}")
    return CORRECT if ok else WRONG


def verify_number(response: str, reference: str) -> VerifyResult:
    """The response's number (`number_answer`: after the last "=", else the last number) equal to the
    reference as an exact rational ("10" == "10.0"); "no_answer" when the response has no number."""
    pred = number_answer(response)
    if pred is None:
        return NO_ANSWER
    p, r = _as_rational(pred), _as_rational(reference.strip())
    if p is not None and r is not None:
        return CORRECT if p == r else WRONG
    return CORRECT if normalize_exact(pred) == normalize_exact(reference) else WRONG


# ---------------------------------------------------------------- user verifiers


def load_user_verifier(spec: str, *, where: str = "verifier") -> Callable[..., Any]:
    """Import `module:function`; ConfigError naming `where` and the spec when it cannot be found (also
    the loader of user reward functions, `workbench.tasks.reward_config`)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        allowed = f"neither {' nor '.join(BUILTIN_METHODS)} nor" if where == "verifier" else "not"
        raise ConfigError(f"{where}: {spec!r} is {allowed} 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as exc:
        raise ConfigError(f"{where}: cannot import module {module_name!r} of {spec!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{where}: {module_name!r} has no callable {attr!r}")
    return fn


def _accepts_prompt(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "prompt" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def score_user_result(value: Any) -> VerifyResult:
    """A user verifier's return value as a result: bool, or a finite float (the reward; whether it
    counts correct is the default rule, `workbench.correctness.DEFAULT_RULE`)."""
    if isinstance(value, bool):
        return CORRECT if value else WRONG
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        reward = float(value)
        ok = is_correct(reward)
        return VerifyResult(reward, "correct" if ok else "wrong", ok)
    return error_result(f"returned {type(value).__name__} {value!r:.40}, not a bool or finite float")


class Verifier:
    """A verifier bound to its method and timeout: `verifier(response, reference, prompt)`.

    Built once per task (imports a user verifier once); calls never raise.
    """

    def __init__(self, method: str = "exact", timeout_s: float | None = DEFAULT_TIMEOUT_S):
        self.method = method
        self.timeout_s = timeout_s
        self._user = None if method in BUILTIN_METHODS else load_user_verifier(method)
        self._user_prompt = self._user is not None and _accepts_prompt(self._user)

    def __call__(self, response: str, reference: str, prompt: Prompt | None = None) -> VerifyResult:
        try:
            if self.method == "exact":
                return verify_exact(response, reference)
            if self.method == "math":
                return verify_math(response, reference, self.timeout_s)
            if self.method == "number":
                return verify_number(response, reference)
            fn = self._user
            if self._user_prompt:
                call = lambda: fn(response, reference, prompt=prompt)  # noqa: E731
            else:
                call = lambda: fn(response, reference)  # noqa: E731
            return score_user_result(call_with_timeout(call, self.timeout_s))
        except VerifierTimeout as exc:
            return error_result(str(exc))
        except Exception as exc:  # noqa: BLE001 - a verifier must never crash the run
            return error_result(f"{type(exc).__name__}: {exc}")


_CACHE: dict[tuple[str, float | None], Verifier] = {}


def verify(
    response: str, reference: str, method: str = "math", *, timeout_s: float | None = DEFAULT_TIMEOUT_S
) -> VerifyResult:
    """Judge `response` against `reference` with `method` ("exact", "math", "number" or "module:function")."""
    key = (method, timeout_s)
    verifier = _CACHE.get(key)
    if verifier is None:
        verifier = _CACHE[key] = Verifier(method, timeout_s)
    return verifier(response, reference)
