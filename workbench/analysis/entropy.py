"""Token-entropy statistics over rollouts-shaped frames (the store's `rollouts` table).

Entropy here is the entropy (nats) of the distribution each token was sampled from, logged per token
in `token_entropy`. Falling entropy is the usual early sign of a policy sharpening onto few answers
("entropy collapse", Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"); the few
high-entropy "forking" tokens are where reasoning paths branch (Wang et al. 2025, "Beyond the 80/20
Rule": the top 20% highest-entropy tokens carry most of the RL gain).

Functions take a Polars frame with at least `run_id, step, prompt_id, idx, token_entropy` (and
`token_ids`, `reward` where used), and return tidy frames ready to plot.
"""

from __future__ import annotations

from typing import Callable, Sequence

import polars as pl

from workbench.correctness import Rule, correct_expr, parse_rule

_KEYS = ("run_id", "step", "stage", "prompt_id", "idx", "reward", "correct")


def _logged(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Rollouts that carry per-token entropy (null when logged with entropy off)."""
    return rollouts.filter(pl.col("token_entropy").is_not_null())


def _lean_tokens(rollouts: pl.DataFrame, by: Sequence[str], *, position: bool = False,
                 token_id: bool = False, row: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Token rows holding only small integer columns (a group id `_g` for `by`, `entropy`, and on
    request `position`, `token_id`, `_row`), plus the frame mapping `_g` back to the `by` values.

    Exploding string keys (run ids, prompt ids) to one row per token costs most of the time and memory
    on a real run (~20M tokens per 100k rollouts), so the keys are joined back after aggregation.
    """
    frame = _logged(rollouts).with_row_index("_row")
    if by:
        groups = frame.select(list(by)).unique(maintain_order=True).with_row_index("_g")
        frame = frame.join(groups, on=list(by), how="left", nulls_equal=True, maintain_order="left")
    else:
        groups = pl.DataFrame({"_g": [0]}, schema={"_g": pl.UInt32})
        frame = frame.with_columns(pl.lit(0, dtype=pl.UInt32).alias("_g"))
    cols = ["_g", "token_entropy"] + (["_row"] if row else []) + (["token_ids"] if token_id else [])
    lean = frame.select(cols)
    if position:
        lean = lean.with_columns(pl.int_ranges(0, pl.col("token_entropy").list.len(), dtype=pl.Int64)
                                 .alias("position"))
    lists = ["token_entropy"] + (["token_ids"] if token_id else []) + (["position"] if position else [])
    out = lean.explode(lists).rename({"token_entropy": "entropy"})
    if token_id:
        out = out.rename({"token_ids": "token_id"})
    return out.drop_nulls("entropy").with_columns(pl.col("entropy").cast(pl.Float64)), groups


def token_entropies(rollouts: pl.DataFrame) -> pl.DataFrame:
    """One row per logged token: the rollout's keys, `position` (0-based), `token_id` and `entropy`.

    Rollouts without per-token entropy (null, e.g. logged with entropy off) contribute no rows.
    """
    keys = [c for c in _KEYS if c in rollouts.columns]
    with_ids = "token_ids" in rollouts.columns
    tokens, _ = _lean_tokens(rollouts, [], position=True, token_id=with_ids, row=True)
    heads = _logged(rollouts).select(keys).with_row_index("_row")
    return tokens.join(heads, on="_row", how="left", maintain_order="left").select(
        *keys, "position", *(["token_id"] if with_ids else []), "entropy")


def entropy_by_step(rollouts: pl.DataFrame, *, by: Sequence[str] = ("run_id", "step"),
                    quantiles: Sequence[float] = (0.1, 0.5, 0.9)) -> pl.DataFrame:
    """Per group: token-weighted mean entropy, its quantiles over tokens, rollouts and tokens counted.

    Columns `*by, entropy_mean, entropy_q10, entropy_q50, ..., tokens, rollouts`.
    """
    tokens, groups = _lean_tokens(rollouts, by)
    aggs = [pl.col("entropy").mean().alias("entropy_mean")]
    aggs += [pl.col("entropy").quantile(q, "linear").alias(f"entropy_q{round(q * 100):02d}") for q in quantiles]
    aggs += [pl.len().alias("tokens")]
    counts = _logged(rollouts).group_by(list(by)).agg(pl.len().alias("rollouts"))
    out = groups.join(tokens.group_by("_g").agg(aggs), on="_g").drop("_g")
    return out.join(counts, on=list(by), nulls_equal=True).sort(list(by))


def entropy_by_position(rollouts: pl.DataFrame, *, by: Sequence[str] = ("run_id",),
                        max_position: int | None = None) -> pl.DataFrame:
    """Mean and std of entropy per token position (0 = first generated token). Columns `*by, position,
    entropy_mean, entropy_std, tokens`."""
    tokens, groups = _lean_tokens(rollouts, by, position=True)
    if max_position is not None:
        tokens = tokens.filter(pl.col("position") <= max_position)
    stats = (tokens.group_by(["_g", "position"])
             .agg(pl.col("entropy").mean().alias("entropy_mean"), pl.col("entropy").std().alias("entropy_std"),
                  pl.len().alias("tokens")))
    return groups.join(stats, on="_g").drop("_g").sort([*by, "position"])


def entropy_by_correctness(rollouts: pl.DataFrame, *, by: Sequence[str] = ("run_id", "step"),
                           rule: str | Rule | None = None) -> pl.DataFrame:
    """Entropy of correct vs incorrect rollouts per group (a rollout's `correct` verdict, else `rule`
    over its reward, see `workbench.correctness`).

    Columns `*by, correct, entropy_mean` (token-weighted), `rollout_entropy_mean` (mean over rollouts
    of each rollout's mean), `tokens`, `rollouts`. Works on the lists directly: no per-token rows.
    """
    per_rollout = (_logged(rollouts)
                   .with_columns(correct_expr(rollouts.columns, parse_rule(rule, where="rule")),
                                 pl.col("token_entropy").list.drop_nulls().alias("_e"))
                   .with_columns(pl.col("_e").list.sum().cast(pl.Float64).alias("sum"), pl.col("_e").list.len().alias("n"))
                   .filter(pl.col("n") > 0))
    return (per_rollout.group_by([*by, "correct"])
            .agg((pl.col("sum").sum() / pl.col("n").sum()).alias("entropy_mean"),
                 (pl.col("sum") / pl.col("n")).mean().alias("rollout_entropy_mean"),
                 pl.col("n").sum().cast(pl.Int64).alias("tokens"), pl.len().alias("rollouts"))
            .sort([*by, "correct"]))


def forking_tokens(rollouts: pl.DataFrame, *, top_frac: float = 0.2, by: Sequence[str] = ("run_id",)
                   ) -> pl.DataFrame:
    """The high-entropy "forking" tokens: those at or above the (1 - top_frac) entropy quantile of
    their group (default: per run). Returns `token_entropies` rows plus the group's `threshold`."""
    if not 0 < top_frac <= 1:
        raise ValueError(f"top_frac must be in (0, 1], got {top_frac}")
    with_ids = "token_ids" in rollouts.columns
    tokens, groups = _lean_tokens(rollouts, by, position=True, token_id=with_ids, row=True)
    thresholds = tokens.group_by("_g").agg(pl.col("entropy").quantile(1 - top_frac, "linear").alias("threshold"))
    forks = tokens.join(thresholds, on="_g").filter(pl.col("entropy") >= pl.col("threshold")).drop("_g")
    keys = [c for c in _KEYS if c in rollouts.columns]
    heads = _logged(rollouts).select(keys).with_row_index("_row")
    out = forks.join(heads, on="_row", how="left").select(
        *keys, "position", *(["token_id"] if with_ids else []), "entropy", "threshold")
    return out.sort([*by, *[c for c in ("step", "prompt_id", "idx", "position") if c in out.columns and c not in by]])


def forking_token_counts(forks: pl.DataFrame, *, by: Sequence[str] = ("run_id",),
                         decode: Callable[[int], str] | None = None) -> pl.DataFrame:
    """Which token ids are forking tokens most often: `*by, token_id, count, share, entropy_mean`
    (plus `text` when `decode` maps an id to its text), most frequent first."""
    out = (forks.group_by([*by, "token_id"])
           .agg(pl.len().alias("count"), pl.col("entropy").mean().alias("entropy_mean"))
           .with_columns((pl.col("count") / pl.col("count").sum().over(list(by))).alias("share"))
           .sort([*by, "count", "token_id"], descending=[False] * len(by) + [True, False]))
    if decode is not None:
        out = out.with_columns(pl.col("token_id").map_elements(decode, return_dtype=pl.String).alias("text"))
    return out


def detect_entropy_collapse(per_step: pl.DataFrame, *, value: str = "entropy_mean", fraction: float = 0.5,
                            patience: int = 5, baseline_steps: int = 1) -> pl.DataFrame:
    """Flag runs whose entropy stays below `fraction` x its initial value for `patience` consecutive steps.

    `per_step` has `run_id, step` and a `value` column (the store's `steps` table, or `entropy_by_step`).
    The initial value is the mean over the first `baseline_steps` steps. Returns one row per run:
    `run_id, initial, threshold, collapsed, collapse_step` (first step of the first qualifying streak,
    null if none), `detected_step` (the step at which the streak reached `patience`), `final`.
    """
    if not 0 < fraction < 1 or patience < 1 or baseline_steps < 1:
        raise ValueError("need 0 < fraction < 1, patience >= 1 and baseline_steps >= 1")
    rows = []
    for (run_id,), run in per_step.drop_nulls(value).sort("step").group_by(["run_id"], maintain_order=True):
        steps, vals = run["step"].to_list(), run[value].to_list()
        initial = sum(vals[:baseline_steps]) / len(vals[:baseline_steps])
        threshold = fraction * initial
        start = detected = None
        streak = 0
        for s, v in zip(steps, vals):
            streak = streak + 1 if v < threshold else 0
            if streak == 1:
                start = s
            if streak == patience:
                detected = s
                break
        rows.append({"run_id": run_id, "initial": initial, "threshold": threshold,
                     "collapsed": detected is not None, "collapse_step": start if detected is not None else None,
                     "detected_step": detected, "final": vals[-1]})
    schema = {"run_id": per_step.schema["run_id"], "initial": pl.Float64, "threshold": pl.Float64,
              "collapsed": pl.Boolean, "collapse_step": pl.Int64, "detected_step": pl.Int64, "final": pl.Float64}
    return pl.DataFrame(rows, schema=schema)
