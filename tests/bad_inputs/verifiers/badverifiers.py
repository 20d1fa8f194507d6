"""User verifiers that misbehave, for the bad-input corpus (`--method badverifiers:<name>`)."""

import re
import time


def sleeps(response, reference):
    """Never answers in time: sleeps for an hour."""
    time.sleep(3600)
    return True


def spins(response, reference):
    """Never answers in time: a busy loop."""
    while True:
        pass


def backtracks(response, reference):
    """Catastrophic regular-expression backtracking on a short input."""
    return re.match(r"(a+)+$", "a" * 64 + "b") is not None


def raises(response, reference):
    """Raises instead of answering."""
    raise RuntimeError("boom from a user verifier")


def returns_text(response, reference):
    """Returns neither a bool nor a finite number."""
    return "maybe"


def returns_nan(response, reference):
    """Returns a non-finite reward."""
    return float("nan")
