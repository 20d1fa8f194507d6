"""`workbench bench logprobs`: the tiny run with `logging.token_logprobs` on and off, side by side."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner


@pytest.mark.slow
def test_the_bench_measures_both_sides_and_the_columns_bytes(organism_models):
    from benchmarks.logprob_cost import bench_token_logprobs

    out = bench_token_logprobs(steps=4, rounds=1)
    assert out["on"]["steps_timed"] == out["off"]["steps_timed"] == 2
    assert out["on"]["bytes_per_rollout"] > out["off"]["bytes_per_rollout"] > 0
    assert out["step_time_ratio_on_vs_off"] > 0
    one = out["one_file"]
    assert one["rollouts"] == 4 * 32 and one["bytes_per_rollout_with"] > one["bytes_per_rollout_without"]


def test_the_command_refuses_a_run_too_short_to_time():
    from workbench.cli import app

    result = CliRunner().invoke(app, ["bench", "logprobs", "--steps", "2"])
    assert result.exit_code != 0 and "--steps" in result.output
