"""The test tiers: `dev/durations.py` reads a `--durations=0` report into each test's total seconds, and
the tests it measured over `SLOW_S` are marked `slow` at collection (tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _durations():
    spec = importlib.util.spec_from_file_location("durations", ROOT / "dev" / "durations.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_durations_report_adds_setup_call_and_teardown_per_test():
    report = """============================= slowest durations =============================
    41.02s call     tests/app/test_browser.py::test_pages[runs]
    3.10s setup    tests/app/test_browser.py::test_pages[runs]
    0.01s teardown tests/app/test_browser.py::test_pages[runs]
    2.50s call     tests/store/test_api.py::test_x
    (12 durations < 0.005s hidden.)
    """
    assert _durations().parse(report) == {"tests/app/test_browser.py::test_pages[runs]": pytest.approx(44.13),
                                          "tests/store/test_api.py::test_x": 2.5}


def test_the_measured_durations_name_tests_that_exist_and_mark_the_slow_ones(request):
    path = ROOT / "tests" / "durations.json"
    if not path.is_file():
        pytest.skip("no tests/durations.json yet (dev/durations.py writes it from a whole run)")
    measured = json.loads(path.read_text())
    assert measured and all(v >= 0 for v in measured.values())
    here = [i for i in request.session.items if i.nodeid in measured]
    for item in here:
        slow = item.get_closest_marker("slow") is not None
        assert slow or measured[item.nodeid] <= 5.0, item.nodeid
