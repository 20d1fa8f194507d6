"""Reward terms on the pages (pure: no Streamlit, no store): each term's mean per step out of the steps'
metrics (`reward/<term>`, written by the engine and the importers), and the colour and text of a
rollout's terms on the Rollouts page. See workbench/tasks/rewards.py for what a term is."""

from __future__ import annotations

import html
import json
import math
from typing import Any

import polars as pl

from workbench.tasks.rewards import METRIC_PREFIX

REGIME_COLUMNS = ("allocator", "budget", "budget_kind")
"""Steps columns kept beside the term means (the curves' hover names the regime in force)."""


def metric_items(metrics: Any) -> list[tuple[str, Any]]:
    """A steps row's `metrics` as (key, value) pairs, whichever form the MAP arrives in (a dict, a list
    of key/value structs, or JSON text)."""
    if metrics is None:
        return []
    if isinstance(metrics, dict):
        return list(metrics.items())
    if isinstance(metrics, str):
        return list(json.loads(metrics).items())
    return [(m["key"], m["value"]) for m in metrics]


def term_names(steps: pl.DataFrame) -> list[str]:
    """The reward terms a run logged (the `reward/<term>` step metrics), in first-seen order."""
    names: dict[str, None] = {}
    if "metrics" in steps.columns:
        for metrics in steps["metrics"].to_list():
            names.update((k[len(METRIC_PREFIX):], None) for k, _ in metric_items(metrics) if k.startswith(METRIC_PREFIX))
    return list(names)


def term_means(steps: pl.DataFrame) -> pl.DataFrame:
    """One row per step: `step`, the regime columns, and `reward/<term>` for every term (null where a
    step did not log it)."""
    names = term_names(steps)
    keep = ["step", *[c for c in REGIME_COLUMNS if c in steps.columns]]
    if not names:
        return steps.select(keep) if "step" in steps.columns else pl.DataFrame()
    values: dict[str, list[float | None]] = {METRIC_PREFIX + n: [] for n in names}
    for metrics in steps["metrics"].to_list():
        got = dict(metric_items(metrics))
        for key, col in values.items():
            v = got.get(key)
            col.append(None if v is None else float(v))
    return steps.select(keep).with_columns([pl.Series(k, v, dtype=pl.Float64) for k, v in values.items()])


def term_colour(value: float | None, lo: float, hi: float) -> str:
    """A diverging colour for a term's value: red below zero, green above, white at zero (scaled by the
    largest magnitude on the page); grey when the rollout has no value for the term."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "rgb(235,235,235)"
    scale = max(abs(lo), abs(hi), 1e-12)
    t = max(-1.0, min(1.0, float(value) / scale))
    if t >= 0:
        return f"rgb({int(255 - 155 * t)},{int(255 - 40 * t)},{int(255 - 155 * t)})"
    return f"rgb(255,{int(255 + 155 * t)},{int(255 + 155 * t)})"


def terms_text(terms: Any) -> str:
    """A rollout's terms as one short line: `verifier 1 · format 0 · overlong -0.333`."""
    items = terms.items() if isinstance(terms, dict) else metric_items(terms)
    return " · ".join(f"{k} {v:.3g}" for k, v in items if v is not None)


def term_value(terms: Any, name: str) -> float | None:
    """One term's value in a rollout's `reward_terms` (None when absent)."""
    return dict(terms.items() if isinstance(terms, dict) else metric_items(terms)).get(name)


def term_range(rows: list[dict], name: str) -> tuple[float, float]:
    """The smallest and largest value of a term among `rows` (0, 0 when none has it)."""
    vals = [v for r in rows if (v := term_value(r.get("reward_terms"), name)) is not None]
    return (min(vals), max(vals)) if vals else (0.0, 0.0)


def terms_cell(row: dict, term: str | None, span: tuple[float, float]) -> str:
    """The Rollouts table's terms cell of one rollout: its terms as text, the background coloured by
    `term` (when one is picked). Escaped."""
    terms = row.get("reward_terms")
    text = html.escape(terms_text(terms)) if terms is not None else "–"
    style = "padding:2px 6px;white-space:nowrap"
    if term:
        value = term_value(terms, term) if terms is not None else None
        shown = "–" if value is None else f"{value:.3g}"
        style += f";background:{term_colour(value, *span)}"
        return f"<td style='{style}' title='{html.escape(term)} = {shown}'>{text}</td>"
    return f"<td style='{style}'>{text}</td>"
