"""`workbench bench async`'s arithmetic: the bound is the longer phase, efficiency measured / bound,
and bad options are refused naming the option (the runs themselves are the benchmark, not CI)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from workbench.experiments.async_bench import _figures


def test_bound_and_efficiency_from_the_phase_times():
    marks = [{"wall_s": 2.0, "rollout/count": 100, "timing_s/generate": 1.4, "timing_s/verify": 0.1,
              "timing_s/trainer_busy": 1.0, "timing_s/trainer_idle": 1.0, "timing_s/generator_idle": 0.5}] * 3
    f = _figures(marks, pipelined=True)
    assert f["bound_rollouts_per_s"] == pytest.approx(100 / 1.5)
    assert f["rollouts_per_s"] == pytest.approx(50.0)
    assert f["efficiency"] == pytest.approx(50.0 / (100 / 1.5))
    assert f["trainer_idle_frac"] == pytest.approx(0.5) and f["generator_idle_frac"] == pytest.approx(0.25)
    sync = _figures([{"wall_s": 2.0, "rollout/count": 100, "timing_s/generate": 0.5}], pipelined=False)
    assert sync["t_train_s"] == pytest.approx(1.5) and sync["efficiency"] == pytest.approx(0.75)


@pytest.mark.parametrize("args, words", [(["--etas", "0"], "--etas"), (["--etas", "x"], "--etas"),
                                         (["--profiles", "short"], "--profiles")])
def test_bad_options_are_refused(args, words):
    from workbench.cli import app
    from workbench.errors import ConfigError

    out = CliRunner().invoke(app, ["bench", "async", *args])  # the command line prints it as one line
    assert isinstance(out.exception, ConfigError) and str(out.exception).startswith(words)
