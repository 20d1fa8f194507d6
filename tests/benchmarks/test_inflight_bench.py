"""`workbench bench inflight`: runs and batches with and without the rollouts-in-flight channel, side by
side; the lag a reader sees while long batches generate; bad options named."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner


@pytest.mark.slow
def test_the_bench_times_both_sides_of_runs_and_batches(organism_models):
    from benchmarks.inflight_bench import bench_inflight

    out = bench_inflight(steps=4, rounds=1, rows=8, tokens=4, repeats=2)
    assert out["run"]["steps_timed_per_side"] == 2 and out["run_step_ratio_on_vs_off"] > 0
    assert 0 < out["run"]["channel_share_of_step"] < 1
    b = out["batch"]
    assert b["same_tokens"] is True  # the channel changes no token
    assert b["writes"] >= 3  # at least the end of each batch with it (3 batches: a warm-up and 2 timed)
    assert 0 < b["channel_share"] < 1 and b["channel_ms_per_write"] > 0 and b["ratio_on_vs_off"] > 0


def test_the_lag_is_read_while_long_batches_generate(organism_models):
    from benchmarks.inflight_bench import bench_inflight

    out = bench_inflight(rows=2, tokens=96, repeats=1, every_s=0.01, poll_s=0.01, model="random", hidden=16,
                         runs=False)
    assert "run" not in out and out["batch"]["model"] == "random"
    assert out["batch"]["tokens_per_batch"] == 2 * 96  # no EOS: every row decodes all its tokens
    lag = out["lag"]
    assert lag["reads_while_generating"] > 0 and 0 <= lag["p50_age_s"] <= lag["max_age_s"]
    assert lag["worst_shown_lag_s"] == lag["max_age_s"] + lag["page_refresh_s"]


@pytest.mark.parametrize("args, says", [(["--model", "huge"], "--model: 'huge'"), (["--steps", "2"], "--steps"),
                                        (["--every", "0"], "--every: 0.0")])
def test_the_command_refuses_bad_options_naming_them(args, says):
    from workbench.cli import app

    result = CliRunner().invoke(app, ["bench", "inflight", *args])
    said = result.output + str(result.exception or "")  # a ConfigError: one line by the entry point
    assert result.exit_code != 0 and says in said, said
