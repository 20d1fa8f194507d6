"""`workbench bench tools`: what a tool call costs. The target (issue #40): a calculator call adds at
most 20 ms at p95.

    workbench bench tools --json                      # 300 calls, batches of 32, 10 fresh interpreters
    workbench bench tools --calls 1000 --batch 64 --json

Measured, each after `warmup` calls:
- `calculator`: `calls` calls one after another, as the caller sees them (submit to result), ms;
  `sandbox_ms`: the same calls as the sandbox process timed them (hand-over to answer);
  `cpu_ms_per_call`: CPU of the sandbox process and its children per call (the figure that does not
  depend on how busy the machine is; /proc counts 10 ms ticks). Served by warm workers (the
  calculator is pure); half the calls in each of two sandboxes, alternating with
- `calculator_fork_per_call`: the same with a fresh child per call (`Sandbox(warm=False)`).
- `python`: the same for a short program of the python tool (an import, a loop, a print): a fresh
  child per call, as for every tool that is not pure.
- `batch`: `rounds` batches of `batch` calculator calls run at once (`call_many`): the batch's wall
  time and that time per call.
- `fresh_interpreter`: `fresh` calls each in a new `python -c` process that imports the calculator
  (the design this sandbox avoids: a fork of a warm process instead of an interpreter per call).
- `start_s`: starting the sandbox process; `load_avg`: the machine's 1-minute load before and after.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

from workbench.tools import Sandbox, ToolLimits

PROGRAM = ("import math\nfrom fractions import Fraction\ns = sum(Fraction(1, k) for k in range(1, 20))\n"
           "print(s)\nmath.gcd(84, 36)")
FRESH = ("import sys; from workbench.tools.calculator import calculator; "
         "sys.stdout.write(calculator({'expression': '37*48'}))")


def percentiles(ms: list[float]) -> dict[str, float]:
    """p50, p95, p99, mean and max of `ms`, rounded to 0.01 ms."""
    s = sorted(ms)
    at = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"n": len(s), "p50": round(at(0.50), 2), "p95": round(at(0.95), 2), "p99": round(at(0.99), 2),
            "mean": round(statistics.fmean(s), 2), "max": round(s[-1], 2)}


def _timed(box: Sandbox, name: str, arguments: dict[str, Any], n: int) -> tuple[list[float], list[float]]:
    outer, inner = [], []
    for _ in range(n):
        t = time.perf_counter()
        result = box.call(name, arguments)
        outer.append((time.perf_counter() - t) * 1000)
        inner.append(result.seconds * 1000)
        if result.error:
            raise RuntimeError(f"bench tools: {name} failed: {result.kind}: {result.text}")
    return outer, inner


def _cpu_s(pid: int | None) -> float:
    """CPU seconds of process `pid`, its reaped children and its live ones (the warm workers): user +
    system, from /proc."""
    def own(p: int | str) -> float:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # it ended between the listing and the read
            return 0.0
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = f.read().split()
    return own(pid) + sum(own(child) for child in children)


def _calculator(warm: bool, calls: int, warmup: int, parallel: int) -> tuple[list[float], list[float], float]:
    """`calls` calculator calls in a sandbox with warm workers or a fresh child per call: caller ms,
    sandbox ms, and the CPU seconds the sandbox process and its children spent on them."""
    with Sandbox(ToolLimits(), parallel=parallel, warm=warm) as box:
        _timed(box, "calculator", {"expression": "37*48"}, warmup)
        cpu = _cpu_s(box.pid)
        outer, inner = _timed(box, "calculator", {"expression": "37*48"}, calls)
        time.sleep(0.05)  # the last child's exit, reaped after its answer, is counted
        return outer, inner, _cpu_s(box.pid) - cpu


def _merge(parts: list[tuple[list[float], list[float], float]]) -> dict[str, Any]:
    outer = [x for p in parts for x in p[0]]
    inner = [x for p in parts for x in p[1]]
    cpu = sum(p[2] for p in parts)
    return {**percentiles(outer), "sandbox_ms": percentiles(inner),
            "cpu_ms_per_call": round(1000 * cpu / len(outer), 2)}


def run_bench(*, calls: int = 300, batch: int = 32, rounds: int = 10, fresh: int = 10, warmup: int = 20,
              parallel: int = 8) -> dict[str, Any]:
    """The figures of the module docstring."""
    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    box = Sandbox(ToolLimits(), parallel=parallel).start()
    start_s = time.perf_counter() - t
    try:
        _timed(box, "calculator", {"expression": "37*48"}, warmup)
        py, py_inner = _timed(box, "python", {"code": PROGRAM}, max(calls // 3, 1))
        batch_ms = []
        for _ in range(rounds):
            t = time.perf_counter()
            results = box.call_many([("calculator", {"expression": f"{i}*{i}"}) for i in range(batch)])
            batch_ms.append((time.perf_counter() - t) * 1000)
            if any(r.error for r in results):
                raise RuntimeError("bench tools: a batched calculator call failed")
    finally:
        box.close()
    halves = [_calculator(warm, calls // 2 + calls % 2, warmup, parallel) for warm in (True, False, True, False)]
    fresh_ms = []
    for _ in range(fresh):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", FRESH], check=True, capture_output=True)
        fresh_ms.append((time.perf_counter() - t) * 1000)
    calc = _merge(halves[0::2])
    return {
        "calculator": calc,
        "calculator_fork_per_call": _merge(halves[1::2]),
        "python": {**percentiles(py), "sandbox_ms": percentiles(py_inner)},
        "batch": {"size": batch, "parallel": parallel, "batch_ms": percentiles(batch_ms),
                  "per_call_ms": round(statistics.median(batch_ms) / batch, 2)},
        "fresh_interpreter": percentiles(fresh_ms) if fresh_ms else None,
        "target_p95_ms": 20.0,
        "meets_target": calc["p95"] <= 20.0,
        "start_s": round(start_s, 3),
        "network_isolated": box.network_isolated,
        "dropped_to_nobody": box.root,
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
