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
        assert slow or measured[item.nodeid] <= _durations().slow_threshold(), item.nodeid


def test_the_report_reads_the_threshold_the_marks_use():
    import sys

    conftest = sys.modules.get("tests.conftest") or sys.modules.get("conftest")
    slow_s = getattr(conftest, "SLOW_S", None)
    if slow_s is None:  # another folder's conftest took the name: read the root one's value from its file
        spec = importlib.util.spec_from_file_location("root_conftest_for_tiers", ROOT / "tests" / "conftest.py")
        root = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(root)
        slow_s = root.SLOW_S
    assert _durations().slow_threshold() == slow_s > 0
