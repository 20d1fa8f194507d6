"""`workbench bench tools` as a user runs it: the real command in a subprocess, a small size."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", "bench", "tools", *args],
                          capture_output=True, text=True, timeout=300)


def test_bench_tools_json():
    out = run("--calls", "30", "--batch", "4", "--rounds", "2", "--fresh", "1", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    calc = result["calculator"]
    assert calc["n"] == 30 and 0 < calc["p50"] <= calc["p95"] <= calc["p99"] <= calc["max"]
    assert 0 < calc["sandbox_ms"]["p50"] and result["python"]["n"] == 10
    assert result["batch"]["size"] == 4 and result["batch"]["batch_ms"]["n"] == 2
    assert result["fresh_interpreter"]["n"] == 1
    assert result["calculator_fork_per_call"]["n"] == 30 and result["calculator_fork_per_call"]["cpu_ms_per_call"] > 0
    assert result["calculator"]["cpu_ms_per_call"] >= 0  # /proc counts 10 ms ticks: 30 warm calls may read 0
    assert result["meets_target"] == (calc["p95"] <= 20.0)


def test_bench_tools_refuses_bad_sizes():
    out = run("--calls", "0")
    assert out.returncode == 1
    assert "bench tools: --calls must be >= 1, got 0" in out.stderr
