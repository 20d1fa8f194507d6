"""The sandbox against tools that misbehave: each failure is a result with its kind, and the next call
is served. One sandbox process for the module (it forks a child per call)."""

from __future__ import annotations

import os
import time

import pytest
import sample_tools  # noqa: F401 - registers the misbehaving tools

from workbench.tools import TOOLS, Sandbox, ToolLimits, ToolResult, register_tool

LIMITS = ToolLimits(cpu_seconds=1, memory_mb=128, wall_seconds=1.0, max_result_chars=500)
SLACK = ToolLimits(cpu_seconds=1, memory_mb=128, wall_seconds=60.0, max_result_chars=500)
"""For the CPU-limit test: a wall-clock limit far past the CPU one, so a loaded machine still hits CPU first."""


@pytest.fixture(scope="module")
def box():
    with Sandbox(LIMITS, parallel=8) as sandbox:
        yield sandbox


def check_still_serves(box: Sandbox) -> None:
    assert box.call("calculator", {"expression": "37*48"}) == ToolResult("1776", seconds=pytest.approx(0, abs=60))


def test_calculator_call(box):
    result = box.call("calculator", {"expression": "37*48"})
    assert (result.text, result.error, result.kind, result.truncated) == ("1776", False, "ok", False)
    assert 0 < result.seconds < 30


def test_sleeping_forever_times_out(box):
    started = time.monotonic()
    result = box.call("sleep", {})
    assert (result.error, result.kind) == (True, "timeout")
    assert LIMITS.wall_seconds <= result.seconds < 30
    assert time.monotonic() - started < 30
    check_still_serves(box)


def test_allocating_10_gb_is_a_memory_result(box):
    result = box.call("allocate", {"gb": 10})
    assert (result.error, result.kind) == (True, "memory")
    assert "128 MiB" in result.text
    check_still_serves(box)


def test_allocation_within_the_limit_runs(box):
    assert box.call("allocate", {"gb": 64 / 1024}).text == str(64 * 2**20)


def test_spinning_is_stopped_by_the_cpu_limit(box):
    result = box.call("spin", {}, SLACK)
    assert (result.error, result.kind) == (True, "cpu")
    check_still_serves(box)


def test_printing_100_mb_is_an_output_result(box):
    result = box.call("python", {"code": "print('x' * 100 * 2**20)"}, SLACK)  # 100 MB takes a while on a busy machine
    assert (result.error, result.kind, result.truncated) == (True, "output", True)
    assert len(result.text) == LIMITS.max_result_chars and set(result.text) == {"x"}
    check_still_serves(box)


def test_returning_100_mb_is_cut(box):
    result = box.call("big_text", {"mb": 100}, SLACK)
    assert (result.error, result.kind, result.truncated) == (False, "ok", True)
    assert result.text == "y" * LIMITS.max_result_chars


def test_a_raise_is_a_result(box):
    result = box.call("raises", {})
    assert (result.error, result.kind, result.text) == (True, "raised", "KeyError: 'no such thing'")
    odd = box.call("odd_failure", {})
    assert (odd.error, odd.kind, odd.text) == (True, "raised", "a kind of its own")
    said = box.call("says_no", {"x": 3})
    assert (said.error, said.kind, said.text) == (True, "tool_error", "says_no: 3 is not allowed")


@pytest.mark.parametrize("what,kind", [("int", "non_text"), ("bytes", "non_text"), ("none", "non_text"),
                                       ("surrogate", "non_utf8")])
def test_non_text_returns(box, what, kind):
    result = box.call("returns", {"what": what})
    assert (result.error, result.kind) == (True, kind)


def test_calls_refused_before_they_run(box):
    unknown = box.call("nosuch", {"x": 1})
    assert (unknown.kind, unknown.seconds) == ("unknown_tool", 0.0)
    assert "calculator" in unknown.text and "python" in unknown.text
    assert box.call("calculator", ["37*48"]).kind == "malformed"
    assert box.call("calculator", {"expression": "1\udcff"}).kind == "non_utf8"
    assert box.call("calculator", {"expression": float("nan")}).kind == "malformed"
    huge = box.call("calculator", {"expression": "1" * (2 << 20)})
    assert (huge.kind, huge.text) == ("malformed", f"the arguments of calculator take {(2 << 20) + 18} bytes "
                                                   f"(at most {1 << 20})")


def test_no_file_writes(box, tmp_path):
    os.chmod(tmp_path, 0o777)  # even where the child's user may write, it writes nothing
    result = box.call("writes", {"path": str(tmp_path / "out.txt")})
    assert (result.error, result.kind) == (True, "refused")
    assert not (tmp_path / "out.txt").exists()


def test_no_network_no_processes(box):
    assert box.call("connects", {}).kind == "refused"
    assert box.call("forks", {}).kind == "refused"
    assert box.call("python", {"code": "import socket"}).kind == "refused"


@pytest.mark.parametrize("code,event", [
    ("import statistics\nstatistics.sys.modules['os'].system('touch /tmp/x')", "os.system"),
    ("import statistics\nstatistics.sys.modules['os'].open('/tmp/x', 65)", "open"),
    ("import statistics\nstatistics.sys.modules['ctypes'].CDLL(None)", "ctypes.dlopen"),
    ("import statistics\nstatistics.sys.modules['os'].fork()", "os.fork"),
])
def test_the_audit_hook_stands_behind_the_python_tool(box, code, event):
    """A program that reaches `os` through a safe module's globals (past the python tool's own rules)
    is stopped by the audit hook."""
    result = box.call("python", {"code": code})
    assert (result.kind, result.text) == ("refused", f"not allowed in the sandbox: {event}")


def test_kernel_layers(box):
    """What the kernel holds, read from inside a call: the limits, the user, the network namespace."""
    text = box.call("whoami", {}).text
    assert "cpu=1 fsize=0 nproc=0" in text
    if box.root:
        assert "uid=65534" in text
    if box.network_isolated:
        assert text.endswith("net=lo")


@pytest.mark.parametrize("line", ['{"text": 5, "error": false, "kind": "ok", "seconds": 0, "truncated": false}',
                                  '{"text": "x", "error": false, "kind": "pwned", "seconds": 0, "truncated": false}',
                                  '{"text": "x", "error": true, "kind": "ok", "seconds": 0, "truncated": false}',
                                  '{"text": "x"', "[1, 2]"])
def test_a_forged_result_is_not_taken(box, line):
    """A tool that writes its own line to the result pipe and exits: anything but a well-formed result
    is a crash."""
    result = box.call("forges", {"line": line})
    assert (result.error, result.kind) == (True, "crashed")


def test_calls_from_several_threads(box):
    from concurrent.futures import ThreadPoolExecutor

    def work(k: int) -> list[str]:
        return [box.call("calculator", {"expression": f"{k}*100+{i}"}).text for i in range(10)]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(work, range(4))) == [[str(k * 100 + i) for i in range(10)] for k in range(4)]


def test_parallel_calls(box):
    """Eight calls that each sleep 1 s finish together, not one after another (8 s)."""
    started = time.monotonic()
    results = box.call_many([("sleep", {"seconds": 1.0})] * 8, SLACK)
    assert [r.text for r in results] == ["slept"] * 8
    assert time.monotonic() - started < 6


def test_mixed_batch_keeps_order(box):
    calls = [("calculator", {"expression": f"{i}*{i}"}) for i in range(12)] + [("sleep", {}), ("nosuch", {})]
    results = box.call_many(calls)
    assert [r.text for r in results[:12]] == [str(i * i) for i in range(12)]
    assert [r.kind for r in results[12:]] == ["timeout", "unknown_tool"]


def _children(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (from /proc; zombies left out)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def _walls_up(pid: int) -> bool:
    """Whether the child `pid` is past `guard.enter`'s parent-death signal: the process limit it sets next reads
    0 (or the child is gone)."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            line = next(x for x in f if x.startswith("Max processes"))
    except (OSError, StopIteration):
        return True
    return line.split()[2] == "0"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_dead_sandbox_process_is_replaced_and_its_calls_do_not_outlive_it():
    """SIGKILL the sandbox's process with a call sleeping in its child (what the out-of-memory killer
    does): the call comes back "crashed", the next call is served, and the sleeping child is gone with it
    (the parent-death signal), not left running for ever."""
    with Sandbox(SLACK) as sandbox:
        zygote = sandbox.pid
        future = sandbox.submit("sleep", {})
        deadline = time.monotonic() + 30
        while not (calls := _children(zygote)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls, "the call's child never appeared"
        while not all(_walls_up(pid) for pid in calls) and time.monotonic() < deadline:
            time.sleep(0.02)  # into the tool: past its walls, the parent-death signal among them
        assert all(_walls_up(pid) for pid in calls), "the call's child never put its walls up"
        os.kill(zygote, 9)
        result = sandbox.wait(future)
        assert (result.error, result.kind) == (True, "crashed")
        check_still_serves(sandbox)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in calls) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in calls if _alive(pid)], "a call's child outlived the sandbox's process"


def test_spare_children_serve_the_same():
    """With children forked ahead (`spares`), calls and failures come back the same."""
    with Sandbox(LIMITS, spares=2) as sandbox:
        assert [r.text for r in sandbox.call_many([("calculator", {"expression": f"{i}+1"}) for i in range(6)])] == [
            str(i + 1) for i in range(6)]
        assert sandbox.call("sleep", {}).kind == "timeout"
        assert sandbox.call("allocate", {"gb": 10}).kind == "memory"
        check_still_serves(sandbox)


def test_a_tool_registered_after_the_sandbox_started(box):
    """The sandbox's process knows the tools registered when it started; a later one is unknown there
    (a result, not a crash) until a new sandbox starts."""
    check_still_serves(box)  # the module's sandbox is running
    if "late" not in TOOLS:
        register_tool("late")(sample_tools.late)
    result = box.call("late", {})
    assert (result.error, result.kind) == (True, "unknown_tool")
    assert "in the sandbox" in result.text
    with Sandbox(LIMITS) as fresh:
        assert fresh.call("late", {}).text == "late"
