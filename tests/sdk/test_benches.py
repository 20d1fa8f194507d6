"""`workbench bench sdk` and `workbench bench export` at a tiny size: they run and their figures add up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _bench(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "bench", *args, "--json"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bench_sdk_measures_both_sides():
    out = _bench("sdk", "--steps", "8", "--block", "2", "--rollouts", "64", "--tokens", "16", "--hidden", "64",
                 "--batch", "64")
    assert out["samples"] == {"with": 2, "without": 2}
    assert out["step_s_with_logging"] > 0 and out["step_s_without_logging"] > 0
    without = out["step_s_without_logging"]
    ratio = out["step_s_with_logging"] / without - 1  # of the medians as printed, rounded to 4 decimals
    # each median is off by up to 5e-5 from the one the overhead was taken from: w/o moves by up to
    # 5e-5 * (1 + w/o) / o, and the overhead itself is rounded to 4 decimals
    assert out["overhead"] == pytest.approx(ratio, abs=5e-5 * (2 + ratio) / without + 1e-4)
    assert out["commits"] >= 1 and out["problems"] == []


def test_bench_export_counts_what_it_wrote(tmp_path):
    out = _bench("export", "--rollouts", "1024", "--workdir", str(tmp_path))
    assert out["rollouts_selected"] == out["rows_out"] == 1024
    assert out["peak_rss_mb"] > 0 and out["bytes_out"] > 1024 * 200
