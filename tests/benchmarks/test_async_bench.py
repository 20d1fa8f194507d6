"""`workbench bench async`'s arithmetic: the bound is the longer phase, efficiency measured / bound,
and bad options are refused naming the option (the runs themselves are the benchmark, not CI)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from benchmarks.async_bench import _against_sync, _figures, paired_interval


def _row(wall, gen, train, seeds=(0.40, 0.42, 0.38), tokens=1000.0, **extra):
    """One setting's figures as `bench_async` collects them before `_against_sync`."""
    return {"rollouts_per_s": 100 / wall, "rollouts_per_step": 100.0, "step_s": wall, "t_gen_s": gen,
            "t_train_s": train, "pass1_per_seed": list(seeds), "tokens_generated": tokens, **extra}


def test_phase_times_and_idle_shares_of_one_run():
    marks = [{"wall_s": 2.0, "rollout/count": 100, "timing_s/generate": 1.4, "timing_s/verify": 0.1,
              "timing_s/trainer_busy": 1.0, "timing_s/trainer_idle": 1.0, "timing_s/generator_idle": 0.5}] * 3
    f = _figures(marks, pipelined=True)
    assert f["t_gen_s"] == pytest.approx(1.5) and f["t_train_s"] == pytest.approx(1.0)
    assert f["rollouts_per_s"] == pytest.approx(50.0)
    assert f["trainer_idle_frac"] == pytest.approx(0.5) and f["generator_idle_frac"] == pytest.approx(0.25)
    sync = _figures([{"wall_s": 2.0, "rollout/count": 100, "timing_s/generate": 0.5}], pipelined=False)
    assert sync["t_train_s"] == pytest.approx(1.5)


def test_bound_is_the_longer_phase_at_its_fastest_on_one_core_and_speedup_is_against_the_best_sync():
    rows = {"sync_1thread": _row(2.0, 0.8, 1.2), "sync_2threads": _row(1.6, 0.6, 1.0),
            "eta1": _row(1.25, 0.7, 1.1, seeds=(0.41, 0.40, 0.39), tokens=1001.0)}
    out = _against_sync(rows)
    # one-core phases: generation at best 0.7 (eta1), training at best 1.1 (eta1); sync_2threads is
    # not a one-core setting, so its faster phases do not count
    assert out["eta1"]["bound_rollouts_per_s"] == pytest.approx(100 / 1.1)
    assert out["eta1"]["efficiency"] == pytest.approx((100 / 1.25) / (100 / 1.1))
    assert out["eta1"]["speedup_vs_sync"] == pytest.approx(1.6 / 1.25)  # against the 2-thread run
    assert out["eta1"]["pass1_diff_vs_sync"] == pytest.approx((0.01 - 0.02 + 0.01) / 3, abs=1e-12)
    lo, hi = out["eta1"]["pass1_diff_interval90"]
    assert lo < out["eta1"]["pass1_diff_vs_sync"] < hi
    assert out["eta1"]["tokens_vs_sync"] == pytest.approx(1.001)


def test_paired_interval_is_student_t():
    mean, (lo, hi) = paired_interval([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert mean == pytest.approx(2.0)
    assert hi - mean == pytest.approx(2.920 * 1.0 / 3 ** 0.5)  # t(0.95, df 2) x sd / sqrt(n)
    assert paired_interval([0.5], [0.25]) == (0.25, [0.25, 0.25])


@pytest.mark.parametrize("args, words", [(["--etas", "0"], "--etas"), (["--etas", "x"], "--etas"),
                                         (["--profiles", "short"], "--profiles")])
def test_bad_options_are_refused(args, words):
    from workbench.cli import app
    from workbench.errors import ConfigError

    out = CliRunner().invoke(app, ["bench", "async", *args])  # the command line prints it as one line
    assert isinstance(out.exception, ConfigError) and str(out.exception).startswith(words)
