"""Pure frame manipulation for the pages: Polars in, Polars (or plain values) out. No Streamlit and
no store access, so each helper is unit-tested on hand-made frames. Where a reader the store does
not have would do the work in the database, the Polars version lives here (see docs/dashboard.md).
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from workbench.analysis.terms import metrics_long
from workbench.correctness import correct_expr
from workbench.metrics import CATALOGUE, lookup


def _ks(max_samples: int) -> list[int]:
    """k values worth plotting for `max_samples` samples per prompt: 1, 2, 4, ... up to it."""
    ks, k = [], 1
    while k <= max_samples:
        ks.append(k)
        k *= 2
    return ks


def passk_by_step(evals: pl.DataFrame, ks: list[int] | None = None, *, n_boot: int = 200) -> pl.DataFrame:
    """Held-out pass@k per evaluated step: the unbiased estimator per prompt averaged over prompts,
    with a bootstrap interval over prompts (`workbench.analysis.pass_at_k_curve`). Columns step, k,
    pass_at_k, ci_low, ci_high, prompts."""
    from workbench.analysis import pass_at_k_curve

    schema = {"step": pl.Int64, "k": pl.Int64, "pass_at_k": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "prompts": pl.Int64}
    if evals.is_empty():
        return pl.DataFrame(schema=schema)
    ks = ks or _ks(int(evals["samples"].max()))
    out = pass_at_k_curve(evals.with_columns(pl.col("step").cast(pl.Int64)), ks, by=("step",), n_boot=n_boot)
    return out.select(list(schema)).cast(schema)


def window_start(steps: pl.DataFrame, max_rollouts: int) -> int:
    """The first step of the latest steps that together hold at most `max_rollouts` rollouts (at
    least the last step)."""
    s = steps.sort("step", descending=True)
    total = s["rollouts"].fill_null(0).cum_sum()
    inside = s.filter(total <= max_rollouts)
    return int(inside["step"].min()) if not inside.is_empty() else int(s["step"][0])


def step_quantiles(frame: pl.DataFrame, column: str, qs: tuple[float, ...] = (0.1, 0.5, 0.9)) -> pl.DataFrame:
    """Per step, quantiles of `column` (long format: step, q = "p10", value)."""
    schema = {"step": pl.Int64, "q": pl.Utf8, "value": pl.Float64}
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    wide = frame.group_by("step").agg(
        [pl.col(column).quantile(q, "linear").alias(f"p{round(q * 100)}") for q in qs])
    return wide.unpivot(index="step", variable_name="q", value_name="value").cast(schema).sort(["step", "q"])


def regime_changes(steps: pl.DataFrame) -> list[dict]:
    """Steps where the budget or the allocator (or its parameters) in force changed, each with a
    short label for the curves: [{"step": s, "label": "budget 256 rollouts"}, ...]."""
    need = {"step", "budget", "allocator"}
    if steps.is_empty() or not need <= set(steps.columns):
        return []
    cols = [c for c in ("budget", "budget_kind", "allocator", "allocator_params") if c in steps.columns]
    frame = steps.select("step", *cols).sort("step").with_columns(  # only the rows where something changed
        [pl.col(c).shift(1).alias(f"prev_{c}") for c in cols])
    differs = [pl.col(c).ne_missing(pl.col(f"prev_{c}")) for c in cols]
    changed = frame.with_row_index("_i").filter((pl.col("_i") > 0) & pl.any_horizontal(differs))
    out = []
    for row in changed.iter_rows(named=True):
        parts = []
        if row["budget"] != row["prev_budget"] or row.get("budget_kind") != row.get("prev_budget_kind"):
            parts.append(f"budget {row['budget']} {row.get('budget_kind') or ''}".strip())
        if row["allocator"] != row["prev_allocator"]:
            parts.append(f"allocator {row['allocator']}")
        elif row.get("allocator_params") != row.get("prev_allocator_params"):
            parts.append(f"{row['allocator']} params")
        out.append({"step": row["step"], "label": " · ".join(parts)})
    return out


OWN_SOURCE = "workbench"
"""The `source` shown for runs this workbench trained (the store's `runs.source` is null for them)."""


def run_summary(runs: pl.DataFrame, steps: pl.DataFrame, best_pass1: dict[str, float]) -> pl.DataFrame:
    """One row per run for the Runs page: status, source (the engine that wrote it: "workbench", or
    "verl", "trl", ... for imported runs), allocator in force, steps, best held-out pass@1, generated
    tokens, wall time."""
    if runs.is_empty():
        return pl.DataFrame(schema={c: pl.Utf8 for c in ["run_id", "name", "status"]})
    if steps.is_empty():
        agg = pl.DataFrame(schema={"run_id": pl.Utf8, "steps": pl.Int64, "last_step": pl.Int64,
                                   "tokens": pl.Int64, "train_time_s": pl.Float64, "allocator": pl.Utf8})
    else:
        agg = steps.sort("step").group_by("run_id").agg(
            pl.len().alias("steps"),
            pl.col("step").max().alias("last_step"),
            pl.col("tokens_generated").sum().alias("tokens"),
            # null, not 0, for a run that logged no step time (imported runs)
            pl.when(pl.col("step_time_s").is_not_null().any()).then(pl.col("step_time_s").sum()).alias("train_time_s"),
            pl.col("allocator").last().alias("allocator"),
        )
    out = runs.drop([c for c in ("steps", "last_step", "allocator") if c in runs.columns]).join(agg, on="run_id", how="left")
    cfg_alloc = [_config_allocator(c) for c in out["config"].to_list()] if "config" in out.columns else [None] * out.height
    out = out.with_columns(
        pl.coalesce(pl.col("allocator"), pl.Series(cfg_alloc, dtype=pl.Utf8)).alias("allocator"),
        pl.col("steps").fill_null(0),
        pl.col("tokens").fill_null(0),
        pl.Series("best_pass1", [best_pass1.get(r) for r in out["run_id"].to_list()], dtype=pl.Float64),
    )
    if {"created_at", "updated_at"} <= set(out.columns):
        end = pl.max_horizontal("heartbeat_at", "updated_at") if "heartbeat_at" in out.columns else pl.col("updated_at")
        wall = (end - pl.col("created_at")).dt.total_milliseconds() / 1000.0
        if "source" in out.columns:  # an imported run's row times the import, not the training
            wall = pl.when(pl.col("source").is_null()).then(wall)
        out = out.with_columns(wall.alias("wall_time_s"))
    source = pl.col("source").fill_null(OWN_SOURCE) if "source" in out.columns else pl.lit(OWN_SOURCE)
    out = out.with_columns(source.alias("source"))
    keep = ["name", "status", "source", "allocator", "steps", "best_pass1", "tokens", "wall_time_s", "train_time_s",
            "created_at", "run_id"]
    return out.select([c for c in keep if c in out.columns]).sort("created_at", descending=True, nulls_last=True) \
        if "created_at" in out.columns else out.select([c for c in keep if c in out.columns])


def _config_allocator(config: Any) -> str | None:
    try:
        cfg = json.loads(config) if isinstance(config, str) else (config or {})
        alloc = cfg.get("allocator")
        return alloc.get("name") if isinstance(alloc, dict) else alloc
    except (ValueError, AttributeError):
        return None


def budget_used(allocs: pl.DataFrame) -> pl.DataFrame:
    """Rollouts granted per step and stage, with the budget in force (rollout budgets only; a token
    budget is shown by the tokens chart)."""
    if allocs.is_empty():
        return pl.DataFrame(schema={"step": pl.Int64, "stage": pl.Int64, "granted": pl.Int64, "budget": pl.Int64})
    budget = pl.when(pl.col("budget_kind") == "rollouts").then(pl.col("budget")).otherwise(None) \
        if "budget_kind" in allocs.columns else pl.col("budget")
    return (
        allocs.with_columns(budget.alias("_budget"))
        .group_by(["step", "stage"])
        .agg(pl.col("granted").sum(), pl.col("_budget").max().alias("budget"))
        .sort(["step", "stage"])
    )


def budget_used_from_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """`budget_used` from the steps table alone (no allocation rows read): rollouts per step split
    into the first stage and the later ones when the engine logs `alloc/stage2_rollouts`."""
    schema = {"step": pl.Int64, "stage": pl.Int64, "granted": pl.Int64, "budget": pl.Int64}
    if steps.is_empty():
        return pl.DataFrame(schema=schema)
    later = []
    for metrics in steps["metrics"].to_list() if "metrics" in steps.columns else [None] * steps.height:
        items = dict(metrics) if isinstance(metrics, dict) else {}
        later.append(int(items.get("alloc/stage2_rollouts") or 0))
    budget = (pl.when(pl.col("budget_kind") == "rollouts").then(pl.col("budget")).otherwise(None)
              if "budget_kind" in steps.columns else pl.col("budget"))
    base = steps.select("step", pl.col("rollouts").fill_null(0).alias("total"), budget.alias("budget")) \
        .with_columns(pl.Series("later", later, dtype=pl.Int64))
    first = base.select("step", pl.lit(0).alias("stage"), (pl.col("total") - pl.col("later")).alias("granted"), "budget")
    second = base.filter(pl.col("later") > 0).select("step", pl.lit(1).alias("stage"), pl.col("later").alias("granted"),
                                                     "budget")
    return pl.concat([first.cast(schema), second.cast(schema)]).sort(["step", "stage"])


def rollouts_per_prompt(allocs: pl.DataFrame) -> list[int]:
    """Rollouts granted to each prompt over all stages of the step(s) in `allocs`."""
    if allocs.is_empty():
        return []
    per = allocs.group_by(["step", "prompt_id"]).agg(pl.col("granted").sum())
    return per["granted"].to_list()


def calibration_pairs(allocs: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """Predicted pass rate (the stage-0 prediction of each prompt in each step) against the pass
    rate observed over all the group's rollouts in that step (their verdicts, see `workbench.correctness`)."""
    schema = {"step": pl.Int64, "prompt_id": pl.Utf8, "predicted": pl.Float64, "observed": pl.Float64, "n": pl.Int64}
    if allocs.is_empty() or rollouts.is_empty():
        return pl.DataFrame(schema=schema)
    pred = (
        allocs.filter(pl.col("predicted_pass").is_not_null())
        .sort("stage")
        .group_by(["step", "prompt_id"])
        .agg(pl.col("predicted_pass").first().alias("predicted"))
    )
    obs = rollouts.group_by(["step", "prompt_id"]).agg(
        correct_expr(rollouts.columns).mean().alias("observed"), pl.len().alias("n")
    )
    return pred.join(obs, on=["step", "prompt_id"], how="inner").select(list(schema)).cast(schema)


def zero_signal_groups(steps: pl.DataFrame) -> pl.DataFrame:
    """Per step, the number of prompt groups whose rewards did not vary (no GRPO gradient)."""
    if steps.is_empty() or "zero_signal_frac" not in steps.columns:
        return pl.DataFrame(schema={"step": pl.Int64, "zero_signal_groups": pl.Float64})
    return steps.select(
        "step", (pl.col("zero_signal_frac") * pl.col("prompts")).round(0).alias("zero_signal_groups"),
        "zero_signal_frac",
    ).sort("step")


def metric_choices(steps: pl.DataFrame) -> list[str]:
    """The metric picker's names for a run: the numbers it recorded, in the catalogue's order
    (`workbench/metrics.py`), then those the catalogue does not declare (an imported run's own)."""
    long = metrics_long(steps) if "step" in steps.columns else pl.DataFrame()
    seen = set(long.drop_nulls("value")["key"].unique().to_list()) if not long.is_empty() else set()
    order = {m.name: i for i, m in enumerate(CATALOGUE)}

    def rank(name: str) -> tuple[int, str]:
        m = lookup(name)
        return (order[m.name] if m is not None else len(order), name)

    return sorted(seen, key=rank)


def metric_series(steps: pl.DataFrame, name: str) -> pl.DataFrame:
    """Columns step and `name`: one metric of the steps' `metrics` map (steps that lack it left out)."""
    schema = {"step": pl.Int64, name: pl.Float64}
    long = metrics_long(steps, keys=(name,)) if "step" in steps.columns else pl.DataFrame()
    if long.is_empty():
        return pl.DataFrame(schema=schema)
    return long.drop_nulls("value").select("step", pl.col("value").alias(name)).cast(schema).sort("step")


def cumulative_axes(steps: pl.DataFrame) -> pl.DataFrame:
    """Per step of one run: generated tokens so far and training wall time so far (seconds, pauses
    excluded: the sum of step times; null throughout for a run that logged no step time, as imported
    runs do)."""
    s = steps.sort("step")
    timed = "step_time_s" in s.columns and s["step_time_s"].drop_nulls().len() > 0
    out = s.select(
        "step",
        pl.col("tokens_generated").fill_null(0).cum_sum().alias("tokens"),
        (pl.col("step_time_s").fill_null(0.0).cum_sum() if timed else pl.lit(None, dtype=pl.Float64)).alias("wall_s"),
    )
    if out.height and out["step"].min() > 0:  # step 0, before the first update (the first evaluation): nothing yet
        start = pl.DataFrame({"step": [0], "tokens": [0], "wall_s": [0.0 if timed else None]},
                             schema={"step": out.schema["step"], "tokens": out.schema["tokens"], "wall_s": pl.Float64})
        out = pl.concat([start, out], how="vertical_relaxed")
    return out


def reward_curves(per_run: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Mean training reward per step of several runs against generated tokens so far (every run logs
    these, imported ones included). `per_run` maps a run label to its steps. Columns run, step,
    tokens, reward_mean."""
    frames = [cumulative_axes(s).join(s.select("step", "reward_mean"), on="step").with_columns(pl.lit(label).alias("run"))
              for label, s in per_run.items() if not s.is_empty()]
    if not frames:
        return pl.DataFrame(schema={"run": pl.Utf8, "step": pl.Int64, "tokens": pl.Int64, "reward_mean": pl.Float64})
    return pl.concat(frames, how="diagonal_relaxed").select("run", "step", "tokens", "reward_mean")


def group_pass_rates(rewards: pl.DataFrame) -> pl.DataFrame:
    """Per (step, prompt) group of rollouts (columns step, prompt_id, reward, correct): rollouts,
    correct (the verdicts), observed pass rate, and whether the group carried no signal (all rewards equal)."""
    schema = {"step": pl.Int64, "prompt_id": pl.Utf8, "rollouts": pl.Int64, "correct": pl.Int64,
              "pass_rate": pl.Float64, "zero_signal": pl.Boolean}
    if rewards.is_empty():
        return pl.DataFrame(schema=schema)
    return (rewards.group_by(["step", "prompt_id"])
            .agg(pl.len().alias("rollouts"), correct_expr(rewards.columns).sum().alias("correct"),
                 correct_expr(rewards.columns).mean().alias("pass_rate"),
                 (pl.col("reward").n_unique() == 1).alias("zero_signal"))
            .select(list(schema)).cast(schema).sort(["step", "prompt_id"]))


def prompt_visits(rollouts: pl.DataFrame) -> pl.DataFrame:
    """One prompt's visits told by its rollouts alone (columns step, stage, reward, correct), for runs that
    logged no allocation decisions: per step the rollouts it got (`granted`), in how many stages, how
    many were correct, and the observed pass rate (`last_pass`)."""
    schema = {"step": pl.Int64, "granted": pl.Int64, "stages": pl.Int64, "correct": pl.Int64, "last_pass": pl.Float64}
    if rollouts.is_empty():
        return pl.DataFrame(schema=schema)
    return (rollouts.group_by("step")
            .agg(pl.len().alias("granted"), pl.col("stage").n_unique().alias("stages"),
                 correct_expr(rollouts.columns).sum().alias("correct"),
                 correct_expr(rollouts.columns).mean().alias("last_pass"))
            .select(list(schema)).cast(schema).sort("step"))


def busiest_prompt(rewards: pl.DataFrame) -> str | None:
    """The prompt with the most rollouts in a frame (ties: the smallest id)."""
    if rewards.is_empty():
        return None
    counts = rewards.group_by("prompt_id").agg(pl.len().alias("n")).sort(["n", "prompt_id"], descending=[True, False])
    return str(counts["prompt_id"][0])


def compare_curves(per_run: dict[str, tuple[pl.DataFrame, pl.DataFrame]]) -> pl.DataFrame:
    """pass@k of each run against generated tokens and wall time at the evaluated step.
    `per_run` maps a run label to (steps, evals). Columns run, step, tokens, wall_s, k, pass_at_k."""
    frames = []
    for label, (steps, evals) in per_run.items():
        pk = passk_by_step(evals)
        if pk.is_empty() or steps.is_empty():
            continue
        axes = cumulative_axes(steps)
        frames.append(pk.join(axes, on="step", how="inner").with_columns(pl.lit(label).alias("run")))
    if not frames:
        return pl.DataFrame(schema={"run": pl.Utf8, "step": pl.Int64, "tokens": pl.Int64, "wall_s": pl.Float64,
                                    "k": pl.Int64, "pass_at_k": pl.Float64})
    return pl.concat(frames, how="diagonal_relaxed").select("run", "step", "tokens", "wall_s", "k", "pass_at_k")
