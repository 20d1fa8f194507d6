"""Click to drill, the pure part: what a click on a chart means (a step of a step curve, a bin of a
histogram), the histograms of the Rollouts page with their bins, and the Rollouts page's view as URL
query parameters (so a link reopens it). No streamlit, no store: unit-tested in tests/app/test_drill.py;
`app/components.py` wires the clicks to `st.switch_page` and `st.query_params`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from app.charts import PALETTE, empty_figure, layout

BINNED = {"reward": ("reward", float), "length": ("length", int), "entropy": ("entropy_mean", float)}
"""Histogram name -> (rollouts column, type of its bounds); the Rollouts page's filters are
`<name>_min` / `<name>_max`."""
URL_FILTERS = {"prompt": str, "verdict": str, "reward_min": float, "reward_max": float, "length_min": int,
               "length_max": int, "entropy_min": float, "entropy_max": float}
"""The Rollouts page's filters that its URL carries (with `run` and `steps=a-b` or `step=N`)."""


def step_of(points: list[dict[str, Any]]) -> int | None:
    """The step of the first point clicked on a step curve (its x), or None."""
    for p in points or []:
        x = p.get("x")
        if isinstance(x, (int, float)) and math.isfinite(x):
            return int(round(x))
    return None


def lane_step_of(points: list[dict[str, Any]]) -> int | None:
    """The step of the first bar clicked on a lanes chart (`app.pipeline_charts.lanes_chart`: its
    customdata starts with the step), or None."""
    for p in points or []:
        data = p.get("customdata")
        if isinstance(data, (list, tuple)) and data and isinstance(data[0], (int, float)):
            return int(data[0])
    return None


def bin_of(points: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The (low, high) bounds of the first bar clicked on a `bin_chart`, or None."""
    for p in points or []:
        data = p.get("customdata")
        if isinstance(data, (list, tuple)) and len(data) == 2:
            return float(data[0]), float(data[1])
    return None


def bins(values: list[float], kind: type, count: int = 20) -> list[tuple[float, float, int]]:
    """(low, high, rollouts) per bin, both bounds inclusive as the page's filters are: whole numbers for
    an integer column (one bin per value when there are at most `count` of them), else `count` equal
    bins over the values' range (a value on an inner edge counts in the bin above)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return []
    lo, hi = float(v.min()), float(v.max())
    if kind is int:
        width = max(1, math.ceil((hi - lo + 1) / count))
        edges = np.arange(lo, hi + width + 1, width)
        out = []
        for a in edges[:-1]:
            b = a + width - 1
            n = int(((v >= a) & (v <= b)).sum())
            if n:
                out.append((float(a), float(b), n))
        return out
    if hi == lo:
        return [(lo, hi, int(v.size))]
    edges = np.linspace(lo, hi, count + 1)
    counts, _ = np.histogram(v, bins=edges)
    return [(float(a), float(b), int(n)) for a, b, n in zip(edges[:-1], edges[1:], counts) if n]


def bin_chart(binned: list[tuple[float, float, int]], title: str, *, x: str) -> go.Figure:
    """One bar per bin, its bounds in the bar's customdata (what `bin_of` reads back from a click)."""
    if not binned:
        return empty_figure(title)
    centres = [(a + b) / 2 for a, b, _ in binned]
    widths = [max(b - a, 1e-9) if b > a else 0.8 for a, b, _ in binned]
    fig = go.Figure(go.Bar(
        x=centres, y=[n for _, _, n in binned], width=[w * 0.95 for w in widths], marker_color=PALETTE[0],
        customdata=[[a, b] for a, b, _ in binned],
        hovertemplate="%{customdata[0]:.4g} to %{customdata[1]:.4g}: %{y} rollouts<extra>click: these rollouts</extra>"))
    fig.update_layout(clickmode="event+select")
    fig = layout(fig, title, x=x, y="rollouts", height=220)
    fig.layout.hovermode = "closest"  # after `layout`'s "x unified", under which plotly selects no bar on a click
    return fig


def parse(params: dict[str, str]) -> dict[str, Any]:
    """The Rollouts page's view from URL query parameters: `step` or `steps` as (first, last), and each
    of URL_FILTERS, typed; a value that does not parse is left out (the page's default stands)."""
    out: dict[str, Any] = {}
    try:
        if params.get("step"):
            s = int(params["step"])
            out["steps"] = (s, s)
        elif params.get("steps"):
            first, _, last = str(params["steps"]).partition("-")
            out["steps"] = (int(first), int(last or first))
    except ValueError:
        pass
    for name, kind in URL_FILTERS.items():
        raw = params.get(name)
        if raw in (None, ""):
            continue
        try:
            value = kind(raw)
        except ValueError:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        out[name] = value
    return out


def encode(run_id: str, steps: tuple[int, int], filters: dict[str, Any]) -> dict[str, str]:
    """The URL query parameters of a Rollouts view (the inverse of `parse`)."""
    out = {"run": run_id, "steps": f"{int(steps[0])}-{int(steps[1])}"}
    for name in URL_FILTERS:
        value = filters.get(name)
        if value is not None and value != "":
            out[name] = repr(float(value)) if isinstance(value, float) else str(value)
    return out
