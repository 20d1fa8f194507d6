"""Allocation efficiency: how much of a rollout budget produced a learning signal.

A group (all rollouts of one prompt in one step, every stage pooled) whose rewards are all equal has
zero advantage under GRPO-family estimators, so its rollouts taught nothing: they are *zero-signal*.
The rollouts of groups with reward variance are *informative*. An allocator is efficient when it
spends its budget where the outcome is uncertain: informative rollouts per 1,000 generated is the
headline figure, and rollouts per prompt against the prompt's difficulty shows where it spent them.

Inputs are frames shaped like the store's `rollouts` (`run_id, step, prompt_id, reward`, optionally
`correct` and `length`; a row's correctness is its `correct` verdict, else `rule` over its reward, see
`workbench.correctness`) and `allocations` (`run_id, step, stage, prompt_id, asked, granted, predicted_pass`) tables.
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

from workbench.correctness import Rule, correct_expr, parse_rule


def group_outcomes(rollouts: pl.DataFrame, *, rule: str | Rule | None = None) -> pl.DataFrame:
    """One row per (run_id, step, prompt_id) group: `rollouts`, `correct`, `pass_rate`, `signal`
    (rewards not all equal), `tokens` (when `length` is present)."""
    ok = correct_expr(rollouts.columns, parse_rule(rule, where="rule"))
    aggs = [pl.len().alias("rollouts"), ok.sum().alias("correct"), ok.mean().alias("pass_rate"),
            (pl.col("reward").n_unique() > 1).alias("signal")]
    if "length" in rollouts.columns:
        aggs.append(pl.col("length").sum().alias("tokens"))
    return rollouts.group_by(["run_id", "step", "prompt_id"]).agg(aggs).sort(["run_id", "step", "prompt_id"])


def _summarise(groups: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    informative = pl.when(pl.col("signal")).then(pl.col("rollouts")).otherwise(0)
    aggs = [pl.len().alias("groups"), (~pl.col("signal")).sum().alias("zero_signal_groups"),
            (~pl.col("signal")).mean().alias("zero_signal_frac"),
            (pl.col("pass_rate") == 1.0).sum().alias("all_correct_groups"),
            (pl.col("pass_rate") == 0.0).sum().alias("all_wrong_groups"),
            pl.col("rollouts").sum().alias("rollouts"), informative.sum().alias("informative_rollouts"),
            (1000.0 * informative.sum() / pl.col("rollouts").sum()).alias("informative_per_1000")]
    if "tokens" in groups.columns:
        aggs.append(pl.col("tokens").sum().alias("tokens"))
    return groups.group_by(list(by)).agg(aggs).sort(list(by))


def zero_signal_by_step(rollouts: pl.DataFrame, *, rule: str | Rule | None = None) -> pl.DataFrame:
    """Per (run_id, step): groups, zero-signal groups and fraction, all-correct / all-wrong groups,
    rollouts, informative rollouts and informative rollouts per 1,000 (and tokens when logged)."""
    return _summarise(group_outcomes(rollouts, rule=rule), ["run_id", "step"])


def allocation_efficiency(rollouts: pl.DataFrame, *, rule: str | Rule | None = None,
                          by: Sequence[str] = ("run_id",)) -> pl.DataFrame:
    """The same figures as `zero_signal_by_step`, over whole runs (or any grouping of groups)."""
    return _summarise(group_outcomes(rollouts, rule=rule), by)


def rollouts_by_difficulty(rollouts: pl.DataFrame, allocations: pl.DataFrame | None = None, *,
                           difficulty: str = "observed", bins: int = 10, rule: str | Rule | None = None) -> pl.DataFrame:
    """Rollouts per prompt against difficulty, in `bins` equal-width pass-rate bins per run.

    `difficulty="observed"` bins each group by its own pass rate in the step; `"predicted"` by the
    allocator's predicted pass rate at the group's first stage (needs `allocations`), which is what
    the allocator knew when it decided. Columns `run_id, bin, bin_low, bin_high, groups,
    rollouts_per_prompt, rollouts, zero_signal_frac`.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    groups = group_outcomes(rollouts, rule=rule)
    if difficulty == "observed":
        groups = groups.with_columns(pl.col("pass_rate").alias("difficulty"))
    elif difficulty == "predicted":
        if allocations is None:
            raise ValueError("difficulty='predicted' needs the allocations frame")
        first = (allocations.sort("stage").group_by(["run_id", "step", "prompt_id"])
                 .agg(pl.col("predicted_pass").first().alias("difficulty")))
        groups = groups.join(first, on=["run_id", "step", "prompt_id"], how="inner").drop_nulls("difficulty")
    else:
        raise ValueError(f"difficulty must be 'observed' or 'predicted', got {difficulty!r}")
    groups = groups.with_columns(
        (pl.col("difficulty").clip(0.0, 1.0) * bins).floor().cast(pl.Int64).clip(0, bins - 1).alias("bin"))
    return (groups.group_by(["run_id", "bin"])
            .agg(pl.len().alias("groups"), pl.col("rollouts").mean().alias("rollouts_per_prompt"),
                 pl.col("rollouts").sum().alias("rollouts"), (~pl.col("signal")).mean().alias("zero_signal_frac"))
            .with_columns((pl.col("bin") / bins).alias("bin_low"), ((pl.col("bin") + 1) / bins).alias("bin_high"))
            .select("run_id", "bin", "bin_low", "bin_high", "groups", "rollouts_per_prompt", "rollouts",
                    "zero_signal_frac")
            .sort(["run_id", "bin"]))


def grants_by_step(allocations: pl.DataFrame) -> pl.DataFrame:
    """Per (run_id, step): prompts that got rollouts, stages used, rollouts asked and granted, and
    prompts topped up in a later stage (multi-stage allocators)."""
    per_prompt = (allocations.group_by(["run_id", "step", "prompt_id"])
                  .agg(pl.col("asked").sum(), pl.col("granted").sum(),
                       (pl.col("granted") > 0).filter(pl.col("stage") > 0).any().alias("topped_up")))
    stages = allocations.group_by(["run_id", "step"]).agg((pl.col("stage").max() + 1).alias("stages"))
    return (per_prompt.group_by(["run_id", "step"])
            .agg((pl.col("granted") > 0).sum().alias("prompts"), pl.col("asked").sum(), pl.col("granted").sum(),
                 pl.col("topped_up").sum().alias("topped_up_prompts"))
            .join(stages, on=["run_id", "step"]).sort(["run_id", "step"]))
