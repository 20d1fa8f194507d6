"""Reward terms (the parts of a rollout's reward: `rollouts.reward_terms`, step metrics `reward/<term>`)
as frames, for the dashboard and the notebooks.

    steps = store.run_steps(run_id)
    terms_by_step(steps)          # step, reward/<term> for each term (mean per step, unweighted)
    rows = store.rollouts(run_id, limit=10_000, columns=["step", "reward", "verdict", "reward_terms"])
    terms_wide(rows)              # the same rows with one `term:<name>` column per term
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from workbench.tasks.rewards import FRAME_PREFIX, METRIC_PREFIX

REGIME_COLUMNS = ("allocator", "budget", "budget_kind")
"""Steps columns kept beside the term means (the dashboard's curves name the regime on hover)."""


def metric_items(metrics: Any) -> list[tuple[str, Any]]:
    """A steps row's `metrics` (or a rollout's `reward_terms`) as (key, value) pairs, whichever form the
    MAP arrives in: a dict, a list of key/value structs, or JSON text."""
    if metrics is None:
        return []
    if isinstance(metrics, dict):
        return list(metrics.items())
    if isinstance(metrics, str):
        return list(json.loads(metrics).items())
    return [(m["key"], m["value"]) for m in metrics]


def _is_key_value_list(dtype: pl.DataType) -> bool:
    return (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct)
            and {f.name for f in dtype.inner.fields} >= {"key", "value"})


def metrics_long(steps: pl.DataFrame, *, prefix: str | None = None, keys: Any = None,
                 index: str = "step") -> pl.DataFrame:
    """The steps' `metrics` maps as one row per (step row, metric): columns `index` (the step, or a
    row-number column the caller added), `key`, `value` (Float64; null where a value is not a number),
    in row order. Only keys starting with `prefix`, or in `keys`, when given. Vectorised for the
    store's MAP (a list of key/value structs); other forms (dicts, JSON text) row by row."""
    schema = {index: pl.Int64, "key": pl.Utf8, "value": pl.Float64}
    if steps.is_empty() or "metrics" not in steps.columns or index not in steps.columns:
        return pl.DataFrame(schema=schema)
    dtype = steps.schema["metrics"]
    if getattr(pl, "Map", None) is not None and isinstance(dtype, pl.Map):  # the store's MAP, as polars reads it
        steps = steps.with_columns(pl.col("metrics").cast(pl.List(pl.Struct({"key": dtype.key, "value": dtype.value}))))
    if _is_key_value_list(steps.schema["metrics"]):
        long = (steps.select(pl.col(index).cast(pl.Int64), "metrics").explode("metrics").drop_nulls("metrics")
                .select(index, pl.col("metrics").struct.field("key").cast(pl.Utf8).alias("key"),
                        pl.col("metrics").struct.field("value").cast(pl.Float64, strict=False).alias("value")))
    else:
        rows = [(i, str(k), float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
                for i, m in zip(steps[index].to_list(), steps["metrics"].to_list()) for k, v in metric_items(m)]
        long = pl.DataFrame(rows, schema=schema, orient="row")
    if prefix is not None:
        long = long.filter(pl.col("key").str.starts_with(prefix))
    if keys is not None:
        long = long.filter(pl.col("key").is_in(list(keys)))
    return long


def metric_columns(steps: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """One row per row of `steps`, in order, with one Float64 column per wanted metric (`columns`: metric
    key -> column name; null where a row did not log it; the last value where a row logged it twice)."""
    base = steps.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    long = metrics_long(base, keys=columns, index="_row")
    out = pl.DataFrame({"_row": pl.int_range(0, steps.height, dtype=pl.Int64, eager=True)})
    if not long.is_empty():
        wide = long.pivot(on="key", index="_row", values="value", aggregate_function="last")
        out = out.join(wide, on="_row", how="left", maintain_order="left")
    # with_columns, not select: a frame of literals only (no wanted metric logged at all) would have one row
    cols = [(pl.col(k) if k in out.columns else pl.lit(None)).cast(pl.Float64).alias(f"__{c}") for k, c in columns.items()]
    return out.with_columns(cols).select([pl.col(f"__{c}").alias(c) for c in columns.values()])


def term_names(steps: pl.DataFrame) -> list[str]:
    """The reward terms a run logged (its `reward/<term>` step metrics), in first-seen order."""
    long = metrics_long(steps, prefix=METRIC_PREFIX) if "step" in steps.columns else pl.DataFrame()
    if long.is_empty():
        return []
    return [k[len(METRIC_PREFIX):] for k in long["key"].unique(maintain_order=True).to_list()]


def terms_by_step(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step of a steps frame: `step`, the regime columns, and `reward/<term>` for every term
    (the term's mean over the step's rollouts, unweighted; null where a step did not log it)."""
    if "step" not in steps.columns:
        return pl.DataFrame()
    keep = ["step", *[c for c in REGIME_COLUMNS if c in steps.columns]]
    names = [METRIC_PREFIX + n for n in term_names(steps)]
    if not names:
        return steps.select(keep)
    return pl.concat([steps.select(keep), metric_columns(steps, {n: n for n in names})], how="horizontal")


def terms_wide(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Rollouts with their `reward_terms` map spread into one `term:<name>` Float64 column per term
    (null where a rollout lacks the term), the map column dropped."""
    if "reward_terms" not in rollouts.columns:
        return rollouts
    maps = [dict(metric_items(m)) for m in rollouts["reward_terms"].to_list()]
    names = list(dict.fromkeys(k for m in maps for k in m))
    cols = [pl.Series(FRAME_PREFIX + n, [m.get(n) for m in maps], dtype=pl.Float64) for n in names]
    return rollouts.drop("reward_terms").with_columns(cols)
