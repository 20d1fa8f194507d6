"""The asynchronous pipeline's record as frames (docs/async.md, "What is recorded"), for the dashboard's
Run page and the notebooks.

    steps = store.run_steps(run_id)
    is_pipelined(steps)           # True when a generator thread ran ahead of the trainer
    pipeline_by_step(steps)       # step, busy and idle seconds of both sides, the correction's diagnostics
    staleness_histogram(store.staleness_counts(run_id))   # rollouts consumed per staleness, 0..max
    token_logprob_gaps(rows)      # per token: trainer log-prob minus behaviour log-prob
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from workbench.analysis.terms import metric_columns, metrics_long

PIPELINE_MARK = "timing_s/generator_busy"
"""The step metric only a pipelined run logs (the generator thread's busy seconds): what tells a run
whose batches came from a generator thread from one that alternated generation and training."""

PIPELINE_METRICS: dict[str, str] = {
    "timing_s/generator_busy": "generator_busy_s",
    "timing_s/generator_idle": "generator_idle_s",
    "timing_s/trainer_busy": "trainer_busy_s",
    "timing_s/trainer_idle": "trainer_idle_s",
    "rollout/staleness_mean": "staleness_mean",
    "rollout/staleness_max": "staleness_max",
    "rollout/queued_batches": "queued_batches",
    "train/is_weight_mean": "is_weight_mean",
    "train/is_weight_max": "is_weight_max",
    "train/is_truncated_frac": "is_truncated_frac",
    "train/kl_behav_k3": "kl_behav_k3",
    "train/ess_frac": "ess_frac",
    "train/stale_tokens": "stale_tokens",
    "train/clip_frac": "clip_frac",
}
"""Step metric -> column of `pipeline_by_step` (the correction's diagnostics are logged by steps that
updated the policy only; null elsewhere)."""


def is_pipelined(steps: pl.DataFrame) -> bool:
    """Whether any step of a steps frame was made by the pipeline's generator thread (it logged
    `timing_s/generator_busy`). Synchronous runs and imported runs are not."""
    if "metrics" not in steps.columns or "step" not in steps.columns:
        return False
    return not metrics_long(steps, keys=(PIPELINE_MARK,)).is_empty()


def pipeline_by_step(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step of a pipelined run: `step` and the columns of PIPELINE_METRICS (seconds,
    versions, fractions; null where a step did not log the value). Empty for a run that is not
    pipelined (`is_pipelined`)."""
    schema = {"step": pl.Int64, **{col: pl.Float64 for col in PIPELINE_METRICS.values()}}
    if steps.is_empty() or not is_pipelined(steps):
        return pl.DataFrame(schema=schema)
    frame = pl.concat([steps.select(pl.col("step").cast(pl.Int64)), metric_columns(steps, PIPELINE_METRICS)],
                      how="horizontal")
    return frame.select(list(schema)).cast(schema).sort("step")


def idle_fractions(frame: pl.DataFrame) -> dict[str, float | None]:
    """Over a `pipeline_by_step` frame: the share of its time each side waited (`generator`, `trainer`:
    idle / (busy + idle) summed over the steps; None without any time logged)."""
    out: dict[str, float | None] = {}
    for side in ("generator", "trainer"):
        busy = frame[f"{side}_busy_s"].fill_null(0.0).sum() if not frame.is_empty() else 0.0
        idle = frame[f"{side}_idle_s"].fill_null(0.0).sum() if not frame.is_empty() else 0.0
        out[side] = idle / (busy + idle) if busy + idle > 0 else None
    return out


def staleness_histogram(counts: pl.DataFrame) -> pl.DataFrame:
    """Rollouts per staleness (columns staleness, rollouts) with every value from 0 to the largest
    present (a version no rollout was consumed at counts 0); empty when there are none."""
    schema = {"staleness": pl.Int64, "rollouts": pl.Int64}
    counts = counts.filter(pl.col("staleness").is_not_null()) if not counts.is_empty() else counts
    if counts.is_empty():
        return pl.DataFrame(schema=schema)
    top = int(counts["staleness"].max())
    full = pl.DataFrame({"staleness": list(range(max(top, 0) + 1))}, schema={"staleness": pl.Int64})
    got = counts.select(pl.col("staleness").cast(pl.Int64), pl.col("rollouts").cast(pl.Int64))
    return full.join(got, on="staleness", how="left").with_columns(pl.col("rollouts").fill_null(0)) \
        .select(list(schema)).sort("staleness")


def token_logprob_gaps(behaviour: Any, trainer: Any) -> list[float | None]:
    """Per token of one rollout, the trainer's log-probability minus the behaviour policy's (nats;
    log of the importance ratio pi_trainer / pi_behaviour): positive where the trainer finds the token
    likelier than the weights that sampled it. None where either is missing (a rollout the update did
    not compute, an imported run); [] when the rollout has neither list or their lengths differ."""
    b, t = list(behaviour or []), list(trainer or [])
    if not b or not t or len(b) != len(t):
        return []
    return [None if x is None or y is None or _nan(x) or _nan(y) else float(y) - float(x) for x, y in zip(b, t)]


def _nan(x: Any) -> bool:
    return isinstance(x, float) and math.isnan(x)


LANE_SCHEMA = {"step": pl.Int64, "worker": pl.Utf8, "phase": pl.Utf8, "start": pl.Float64, "end": pl.Float64,
               "seconds": pl.Float64}


def worker_lanes(steps: pl.DataFrame, *, last: int | None = None) -> pl.DataFrame:
    """What each worker did, step by step, from the steps' `lane/<worker>/<phase>/{start,end,s}` metrics
    (workbench/engine/timing.py): one row per (step, worker, phase) with `start` and `end` in seconds
    from the earliest start shown and `seconds` inside the phase, for the `last` steps (all: None).
    Empty for a run that recorded no lanes (imported, or from before them)."""
    long = metrics_long(steps, prefix="lane/") if "step" in steps.columns else pl.DataFrame()
    if long.is_empty():
        return pl.DataFrame(schema=LANE_SCHEMA)
    if last is not None:
        keep = long["step"].unique().sort().tail(last)
        long = long.filter(pl.col("step").is_in(keep.implode()))
    parts = long.drop_nulls("value").with_columns(pl.col("key").str.split("/").alias("parts"))
    parts = parts.filter(pl.col("parts").list.len() == 4).select(
        "step", pl.col("parts").list.get(1).alias("worker"), pl.col("parts").list.get(2).alias("phase"),
        pl.col("parts").list.get(3).alias("edge"), "value")
    wide = parts.pivot(on="edge", index=["step", "worker", "phase"], values="value", aggregate_function="last")
    for edge in ("start", "end", "s"):
        if edge not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.Float64).alias(edge))
    wide = wide.drop_nulls(["start", "end"])
    if wide.is_empty():
        return pl.DataFrame(schema=LANE_SCHEMA)
    origin = wide["start"].min()
    return (wide.select("step", "worker", "phase", (pl.col("start") - origin).alias("start"),
                        (pl.col("end") - origin).alias("end"), pl.col("s").alias("seconds"))
            .cast(LANE_SCHEMA).sort("start", "worker", "phase"))
