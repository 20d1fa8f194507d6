"""The asynchronous pipeline's record as frames (workbench.analysis.pipeline), on hand-made steps frames
shaped like the store's (the metrics MAP as Polars reads it: a list of key/value structs)."""

from __future__ import annotations

import math

import polars as pl

from workbench.analysis.pipeline import (
    idle_fractions,
    is_pipelined,
    pipeline_by_step,
    staleness_histogram,
    token_logprob_gaps,
)


def _steps(metrics: list[dict[str, float]]) -> pl.DataFrame:
    return pl.DataFrame({"step": list(range(1, len(metrics) + 1)),
                         "metrics": [[{"key": k, "value": v} for k, v in m.items()] for m in metrics]})


PIPELINED = _steps([
    {"timing_s/generator_busy": 0.2, "timing_s/generator_idle": 0.6, "timing_s/trainer_busy": 0.7,
     "timing_s/trainer_idle": 0.1, "rollout/staleness_max": 0.0, "train/clip_frac": 0.0},
    {"timing_s/generator_busy": 0.3, "timing_s/generator_idle": 0.5, "timing_s/trainer_busy": 0.8,
     "timing_s/trainer_idle": 0.0, "rollout/staleness_max": 1.0, "train/is_weight_mean": 0.97,
     "train/is_weight_max": 2.0, "train/is_truncated_frac": 0.05, "train/kl_behav_k3": 0.01},
])
SYNCHRONOUS = _steps([{"timing_s/generate": 0.2, "train/clip_frac": 0.0}, {"timing_s/generate": 0.3}])


def test_a_pipelined_run_is_told_from_a_synchronous_or_an_imported_one():
    assert is_pipelined(PIPELINED)
    assert not is_pipelined(SYNCHRONOUS)
    assert not is_pipelined(pl.DataFrame({"step": [0], "reward_mean": [0.5]}))  # an import: no metrics column
    assert pipeline_by_step(SYNCHRONOUS).is_empty() and pipeline_by_step(pl.DataFrame()).is_empty()


def test_pipeline_by_step_reads_every_metric_null_where_a_step_lacks_it():
    f = pipeline_by_step(PIPELINED)
    assert f["step"].to_list() == [1, 2]
    assert f["generator_busy_s"].to_list() == [0.2, 0.3]
    assert f["trainer_idle_s"].to_list() == [0.1, 0.0]
    assert f["is_weight_mean"].to_list() == [None, 0.97]  # the first step consumed nothing stale
    assert f["kl_behav_k3"].to_list() == [None, 0.01]
    assert f["clip_frac"].to_list() == [0.0, None]
    assert f["staleness_max"].to_list() == [0.0, 1.0]
    # the metrics MAP as a dict (another reader's form) gives the same frame
    as_dicts = pl.DataFrame({"step": [1, 2], "metrics": [
        {d["key"]: d["value"] for d in m} for m in PIPELINED["metrics"].to_list()]}, strict=False)
    assert pipeline_by_step(as_dicts)["generator_idle_s"].to_list() == [0.6, 0.5]


def test_idle_fractions_sum_the_steps_time():
    idle = idle_fractions(pipeline_by_step(PIPELINED))
    assert math.isclose(idle["generator"], 1.1 / 1.6)
    assert math.isclose(idle["trainer"], 0.1 / 1.6)
    empty = idle_fractions(pipeline_by_step(SYNCHRONOUS))
    assert empty == {"generator": None, "trainer": None}


def test_the_staleness_histogram_counts_every_version_up_to_the_largest():
    counts = pl.DataFrame({"staleness": [0, 2, None], "rollouts": [10, 3, 5]})
    h = staleness_histogram(counts)
    assert h.to_dicts() == [{"staleness": 0, "rollouts": 10}, {"staleness": 1, "rollouts": 0},
                            {"staleness": 2, "rollouts": 3}]
    assert staleness_histogram(pl.DataFrame({"staleness": [], "rollouts": []})).is_empty()


def test_token_gaps_are_trainer_minus_behaviour_and_none_where_missing():
    gaps = token_logprob_gaps([-0.5, -1.0, -2.0], [-0.25, -1.5, float("nan")])
    assert gaps[:2] == [0.25, -0.5] and gaps[2] is None
    assert token_logprob_gaps([-0.5], None) == []           # the update did not compute the rollout
    assert token_logprob_gaps(None, None) == []             # an imported run, or logging off
    assert token_logprob_gaps([-0.5, -0.1], [-0.5]) == []   # lengths differ: nothing to pair
