"""Waiting in tests: on a condition, with a deadline, never for a fixed time.

    from waiting import wait_until
    wait_until(lambda: store.run(rid)["status"] == "paused", 120, "the run to pause")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, every: float = 0.1) -> T:
    """Call `predicate` every `every` seconds until it returns something true, and return that. Past
    `timeout` seconds the test fails with "timed out after N s waiting for <what>"."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)
        time.sleep(every)
