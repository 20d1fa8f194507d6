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


def term_names(steps: pl.DataFrame) -> list[str]:
    """The reward terms a run logged (its `reward/<term>` step metrics), in first-seen order."""
    names: dict[str, None] = {}
    if "metrics" in steps.columns:
        for metrics in steps["metrics"].to_list():
            names.update((k[len(METRIC_PREFIX):], None) for k, _ in metric_items(metrics)
                         if k.startswith(METRIC_PREFIX))
    return list(names)


def terms_by_step(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step of a steps frame: `step`, the regime columns, and `reward/<term>` for every term
    (the term's mean over the step's rollouts, unweighted; null where a step did not log it)."""
    if "step" not in steps.columns:
        return pl.DataFrame()
    keep = ["step", *[c for c in REGIME_COLUMNS if c in steps.columns]]
    values: dict[str, list[float | None]] = {METRIC_PREFIX + n: [] for n in term_names(steps)}
    for metrics in steps["metrics"].to_list() if values else []:
        got = dict(metric_items(metrics))
        for key, col in values.items():
            col.append(None if got.get(key) is None else float(got[key]))
    return steps.select(keep).with_columns([pl.Series(k, v, dtype=pl.Float64) for k, v in values.items()])


def terms_wide(rollouts: pl.DataFrame) -> pl.DataFrame:
    """Rollouts with their `reward_terms` map spread into one `term:<name>` Float64 column per term
    (null where a rollout lacks the term), the map column dropped."""
    if "reward_terms" not in rollouts.columns:
        return rollouts
    maps = [dict(metric_items(m)) for m in rollouts["reward_terms"].to_list()]
    names = list(dict.fromkeys(k for m in maps for k in m))
    cols = [pl.Series(FRAME_PREFIX + n, [m.get(n) for m in maps], dtype=pl.Float64) for n in names]
    return rollouts.drop("reward_terms").with_columns(cols)
