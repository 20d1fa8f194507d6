"""Warm workers for pure tools: calls served one after another by the same process, which is ended
(and replaced) by a timeout, its CPU limit or its retirement, never by a result. `sample_tools.probe`
claims purity but counts the calls its process served, so the tests can see which worker served."""

from __future__ import annotations

import pytest
import sample_tools  # noqa: F401 - registers probe

from workbench.tools import Sandbox, ToolLimits

LIMITS = ToolLimits(cpu_seconds=1, memory_mb=128, wall_seconds=2.0)
SLACK = ToolLimits(cpu_seconds=1, memory_mb=128, wall_seconds=60.0)


@pytest.fixture()
def box():
    with Sandbox(LIMITS, parallel=4) as sandbox:
        yield sandbox


def counts(box: Sandbox, n: int, limits: ToolLimits | None = None) -> list[str]:
    return [box.call("probe", {}, limits).text for _ in range(n)]


def test_one_worker_serves_calls_in_turn(box):
    assert counts(box, 5) == ["1", "2", "3", "4", "5"]


def test_other_limits_get_another_worker(box):
    assert counts(box, 2) == ["1", "2"]
    assert counts(box, 2, SLACK) == ["1", "2"]
    assert counts(box, 1) == ["3"]


def test_a_timeout_ends_the_worker(box):
    assert counts(box, 2) == ["1", "2"]
    result = box.call("probe", {"op": "sleep"})
    assert (result.error, result.kind) == (True, "timeout")
    assert counts(box, 2) == ["1", "2"]


def test_the_cpu_limit_ends_the_worker(box):
    assert counts(box, 1, SLACK) == ["1"]
    assert box.call("probe", {"op": "spin"}, SLACK).kind == "cpu"
    assert counts(box, 1, SLACK) == ["1"]


def test_a_memory_error_is_a_result_and_the_worker_serves_on(box):
    assert counts(box, 1) == ["1"]
    result = box.call("probe", {"op": "alloc"})
    assert (result.error, result.kind) == (True, "memory")
    assert counts(box, 1) == ["3"]


def test_a_worker_retires_after_its_cpu_share(box):
    """A call that uses more than RETIRE_CPU_S is answered; its worker then retires, and the next
    call gets a new one."""
    assert counts(box, 1, SLACK) == ["1"]
    assert box.call("probe", {"op": "burn"}, SLACK).text == "2"
    assert counts(box, 2, SLACK) == ["1", "2"]


def test_parallel_calls_get_several_workers(box):
    results = box.call_many([("probe", {})] * 8)
    assert all(not r.error for r in results)
    assert sorted(int(r.text) for r in results)[0] == 1
    assert counts(box, 1) != ["1"]  # a worker kept from the batch serves it


def test_calculator_is_served_by_workers(box):
    texts = [box.call("calculator", {"expression": f"{i}*3"}).text for i in range(50)]
    assert texts == [str(i * 3) for i in range(50)]
    assert box.call("calculator", {"expression": "2**10**10"}).kind == "tool_error"
    assert box.call("calculator", {"expression": "1+"}).kind == "syntax"
    assert box.call("calculator", {"expression": "6*7"}).text == "42"


def test_without_warm_workers_every_call_is_fresh():
    with Sandbox(LIMITS, warm=False) as sandbox:
        assert counts(sandbox, 3) == ["1", "1", "1"]
