"""Pure chart builders: Polars frames in, Plotly figures out. No Streamlit, no store access, so every
builder is unit-tested on hand-made frames (tests/app/test_charts.py).

Frames follow the store's tables (docs/store.md); derived frames (pass@k per step, regime changes,
budget used, cumulative axes) come from `app.derive`, pure as well; `app.data` only reads the store
and caches.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
TIME_PHASES = [
    ("time_generate_s", "generate"),
    ("time_verify_s", "verify"),
    ("time_train_s", "train"),
    ("time_log_s", "log"),
]


LEGEND_TOP_CHARS = 36
"""Legend text (all entries) that still fits beside a chart's title in a half-width column."""


def layout(fig: go.Figure, title: str, *, x: str = "step", y: str = "", height: int = 300) -> go.Figure:
    """The dashboard's look for a figure (title, axis titles, legend placement, height); every builder,
    here and in the pages' own chart modules (`app.pipeline_charts`), ends with it."""
    # a legend of more than three entries, or of long names (runs on Compare), wraps over the title in a
    # half-width column: put it below the plot
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    on_top = len(names) <= 3 and sum(len(n) for n in names) <= LEGEND_TOP_CHARS
    legend = (dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0) if on_top else
              dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0.0))
    # set property by property: plotly's update_layout / update_xaxes parse every key path and cost ~3x more,
    # on every chart of every page run
    lay = fig.layout
    for key, value in (("title", dict(text=title, x=0.0, font=dict(size=14))),
                       ("margin", dict(l=10, r=10, t=40, b=10)), ("legend", legend)):
        if lay[key].to_plotly_json():
            lay[key].update(value)
        else:
            lay[key] = value
    # below: about 55 characters of legend per line in a half-width column
    lay.height = height if on_top else height + 20 + 22 * math.ceil(sum(len(n) + 4 for n in names) / 55)
    lay.hovermode = "x unified"
    for axis in fig.select_xaxes():
        axis.title.text = x
    if y:
        for axis in fig.select_yaxes():
            axis.title.text = y
    return fig


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


NOT_LOGGED = "not logged by this run"
"""What an empty chart says when the run has steps but never logged the value (imported runs lack
the engine's own columns: loss, timings, budget, ...)."""


def empty_figure(title: str, message: str = "no data yet") -> go.Figure:
    """A titled figure saying why it is empty (so a page never shows a blank box)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return layout(fig, title)


def mark_regimes(fig: go.Figure, changes: list[dict]) -> go.Figure:
    """Dashed vertical lines where the budget or allocator in force changed, labelled with the new
    setting (`changes` as returned by `app.data.regime_changes`). Set in one assignment each: plotly's
    `add_vline` / `add_annotation` cost milliseconds per call, and a run may change regime often."""
    if not changes:
        return fig
    fig.layout.shapes = (*fig.layout.shapes, *(
        dict(type="line", x0=c["step"], x1=c["step"], xref="x", y0=0, y1=1, yref="y domain",
             line=dict(color="#888", dash="dash", width=1)) for c in changes))
    fig.layout.annotations = (*fig.layout.annotations, *(
        dict(x=c["step"], y=1.0, xref="x", yref="paper", text=c["label"], showarrow=False, xanchor="left",
             yanchor="top", font=dict(size=10, color="#555"), textangle=-90) for c in changes))
    return fig


def _regime_hover(steps: pl.DataFrame) -> list[str]:
    """Per step row: the allocator and budget in force ("allocator x · budget 64 rollouts")."""
    cols, parts = steps.columns, []
    if "allocator" in cols:
        a = pl.col("allocator").cast(pl.Utf8)
        parts.append(pl.when(a.is_not_null() & (a != "")).then(pl.lit("allocator ") + a))
    if "budget" in cols:
        kind = pl.col("budget_kind").cast(pl.Utf8).fill_null("") if "budget_kind" in cols else pl.lit("")
        parts.append(pl.when(pl.col("budget").is_not_null()).then(
            pl.concat_str([pl.lit("budget "), pl.col("budget").cast(pl.Utf8), pl.lit(" "), kind]).str.strip_chars()))
    if not parts:
        return [""] * steps.height
    return steps.select(pl.concat_str(parts, separator=" · ", ignore_nulls=True).fill_null("").alias("h"))["h"].to_list()


def line_chart(
    steps: pl.DataFrame,
    series: list[tuple[str, str]],
    title: str,
    *,
    y: str = "",
    changes: list[dict] | None = None,
    band: tuple[str, str] | None = None,
    y_range: tuple[float, float] | None = None,
) -> go.Figure:
    """One line per (column, label) of `steps` against `step`; `band` = (mean column, std column)
    adds a shaded ±1 std band around the first series; the regime in force is on the hover."""
    present = [(c, lab) for c, lab in series if c in steps.columns and steps[c].drop_nulls().len() > 0]
    if steps.is_empty():
        return empty_figure(title)
    if not present:
        return empty_figure(title, NOT_LOGGED)
    steps = steps.sort("step")
    x = steps["step"].to_numpy()
    fig = go.Figure()
    if band and band[0] in steps.columns and band[1] in steps.columns:
        mean = steps[band[0]].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        std = steps[band[1]].cast(pl.Float64).fill_null(0.0).to_numpy()
        fig.add_trace(
            go.Scatter(
                x=np.concatenate([x, x[::-1]]),
                y=np.concatenate([mean + std, (mean - std)[::-1]]),
                fill="toself", mode="lines",
                fillcolor="rgba(31,119,180,0.15)",
                line=dict(width=0),
                hoverinfo="skip",
                name="±1 std",
            )
        )
    hover = _regime_hover(steps)
    for i, (col, label) in enumerate(present):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=steps[col].to_numpy(),
                mode="lines+markers" if len(x) < 60 else "lines",
                name=label,
                line=dict(color=PALETTE[i % len(PALETTE)]),
                customdata=np.array(hover, dtype=object),
                hovertemplate="%{y:.4g}<br>%{customdata}<extra>" + label + "</extra>",
            )
        )
    layout(fig, title, y=y)
    if y_range:
        fig.update_yaxes(range=list(y_range))
    return mark_regimes(fig, changes or [])


def passk_chart(passk: pl.DataFrame, title: str = "held-out pass@k", *, x: str = "step",
                changes: list[dict] | None = None) -> go.Figure:
    """pass@k per k against `x` (a frame with columns x, k, pass_at_k)."""
    if passk.is_empty():
        return empty_figure(title, "no evaluations yet")
    fig = go.Figure()
    for i, k in enumerate(sorted(passk["k"].unique().to_list())):
        sub = passk.filter(pl.col("k") == k).sort(x)
        if "ci_low" in sub.columns and sub["ci_low"].drop_nulls().len() == sub.height and sub.height > 1:
            xs = sub[x].to_numpy()
            fig.add_trace(go.Scatter(
                x=np.concatenate([xs, xs[::-1]]),
                y=np.concatenate([sub["ci_high"].to_numpy(), sub["ci_low"].to_numpy()[::-1]]), fill="toself", mode="lines",
                fillcolor=_rgba(PALETTE[i % len(PALETTE)], 0.1), line=dict(width=0), hoverinfo="skip",
                showlegend=False, name=f"pass@{k} 95% CI",
            ))
        fig.add_trace(
            go.Scatter(
                x=sub[x].to_numpy(),
                y=sub["pass_at_k"].to_numpy(),
                mode="lines+markers",
                name=f"pass@{k}",
                line=dict(color=PALETTE[i % len(PALETTE)]),
            )
        )
    layout(fig, title, y="pass rate")
    fig.update_yaxes(range=[0, 1.02])
    return mark_regimes(fig, changes or [])


def entropy_chart(steps: pl.DataFrame, quantiles: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """Mean token entropy per step, with per-step quantiles of rollout entropy (columns step, q, value)
    as thin lines and the 10–90% range shaded."""
    title = "token entropy"
    if steps.is_empty() or "entropy_mean" not in steps.columns:
        return empty_figure(title)
    fig = line_chart(steps, [("entropy_mean", "mean")], title, y="nats", changes=changes)
    if quantiles.is_empty():
        return fig
    wide = quantiles.pivot(on="q", index="step", values="value").sort("step")
    qs = sorted((c for c in wide.columns if c != "step"), key=lambda c: float(c.lstrip("pq") or 0))
    if len(qs) > 2:  # lowest then highest (the shaded band between them), then the middle ones
        qs = [qs[0], qs[-1], *qs[1:-1]]
    x = wide["step"].to_numpy()
    for j, q in enumerate(qs):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=wide[q].to_numpy(),
                mode="lines",
                name=q,
                line=dict(width=1, dash="dot", color=PALETTE[(j + 1) % len(PALETTE)]),
                fill="tonexty" if j == 1 else None,
                fillcolor="rgba(214,39,40,0.08)",
            )
        )
    return fig


def stacked_time_chart(steps: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """Seconds per phase per step, stacked."""
    title = "time split per step"
    present = [(c, lab) for c, lab in TIME_PHASES if c in steps.columns]
    if steps.is_empty():
        return empty_figure(title)
    if not any(steps[c].drop_nulls().len() for c, _ in present):
        return empty_figure(title, NOT_LOGGED)
    steps = steps.sort("step")
    fig = go.Figure()
    for i, (col, label) in enumerate(present):
        fig.add_trace(
            go.Bar(x=steps["step"].to_numpy(), y=steps[col].fill_null(0).to_numpy(), name=label,
                   marker_color=PALETTE[i % len(PALETTE)])
        )
    fig.update_layout(barmode="stack", bargap=0.05)
    layout(fig, title, y="seconds")
    return mark_regimes(fig, changes or [])


def throughput_chart(steps: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """Rollouts (left axis) and generated tokens (right axis) per step."""
    title = "rollouts and tokens per step"
    if steps.is_empty() or "rollouts" not in steps.columns:
        return empty_figure(title)
    steps = steps.sort("step")
    fig = go.Figure()  # a second y axis by hand: make_subplots costs ~100 ms of CPU per figure
    x = steps["step"].to_numpy()
    fig.add_trace(go.Scatter(x=x, y=steps["rollouts"].to_numpy(), name="rollouts", line=dict(color=PALETTE[0])))
    if "tokens_generated" in steps.columns:
        fig.add_trace(go.Scatter(x=x, y=steps["tokens_generated"].to_numpy(), name="tokens",
                                 line=dict(color=PALETTE[1]), yaxis="y2"))
    layout(fig, title)
    fig.update_layout(yaxis=dict(title_text="rollouts"),
                      yaxis2=dict(title_text="tokens", overlaying="y", side="right", showgrid=False))
    return mark_regimes(fig, changes or [])


def budget_chart(used: pl.DataFrame) -> go.Figure:
    """Per step: rollouts granted, stacked by stage, against the budget in force (columns step, stage,
    granted, budget)."""
    title = "budget used per step (rollouts granted, by stage)"
    if used.is_empty():
        return empty_figure(title)
    fig = go.Figure()
    for i, stage in enumerate(sorted(used["stage"].unique().to_list())):
        sub = used.filter(pl.col("stage") == stage).sort("step")
        fig.add_trace(go.Bar(x=sub["step"].to_numpy(), y=sub["granted"].to_numpy(), name=f"stage {stage}",
                             marker_color=PALETTE[i % len(PALETTE)]))
    per_step = used.group_by("step").agg(pl.col("budget").max()).sort("step")
    if per_step["budget"].drop_nulls().len():
        fig.add_trace(go.Scatter(x=per_step["step"].to_numpy(), y=per_step["budget"].to_numpy(), name="budget",
                                 mode="lines", line=dict(color="#000", dash="dash", shape="hv")))
    fig.update_layout(barmode="stack", bargap=0.05, clickmode="event+select")
    fig = layout(fig, title, y="rollouts")
    fig.layout.hovermode = "closest"  # plotly selects no bar on a click under "x unified": no drill
    return fig


def histogram_chart(values: list[int], title: str, *, x: str) -> go.Figure:
    """Counts of integer values (e.g. rollouts per prompt in one step), one bar per value."""
    if not values:
        return empty_figure(title)
    counts: dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    keys = sorted(counts)
    fig = go.Figure(go.Bar(x=keys, y=[counts[k] for k in keys], marker_color=PALETTE[0]))
    fig.update_layout(hovermode="closest")
    return layout(fig, title, x=x, y="prompts")


def calibration_chart(pairs: pl.DataFrame, title: str = "predicted vs observed pass rate") -> go.Figure:
    """Scatter of an allocator's predicted pass rate against the group's observed pass rate
    (columns predicted, observed, n; optional prompt_id), with the diagonal and binned means."""
    if pairs.is_empty():
        return empty_figure(title, "no predictions logged")
    fig = go.Figure()
    hover = pairs["prompt_id"].to_list() if "prompt_id" in pairs.columns else None
    fig.add_trace(go.Scatter(
        x=pairs["predicted"].to_list(), y=pairs["observed"].to_list(), mode="markers", name="groups",
        marker=dict(size=5, opacity=0.35, color=PALETTE[0]), text=hover,
        hovertemplate="predicted %{x:.2f}<br>observed %{y:.2f}<br>%{text}<extra></extra>",
    ))
    binned = calibration_bins(pairs)
    if not binned.is_empty():
        fig.add_trace(go.Scatter(x=binned["predicted"].to_list(), y=binned["observed"].to_list(),
                                 mode="lines+markers", name="binned mean", line=dict(color=PALETTE[1])))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="ideal",
                             line=dict(color="#888", dash="dash")))
    fig.update_layout(hovermode="closest")
    layout(fig, title, x="predicted pass rate", y="observed pass rate", height=360)
    fig.update_xaxes(range=[-0.02, 1.02])
    fig.update_yaxes(range=[-0.02, 1.02])
    return fig


def calibration_bins(pairs: pl.DataFrame, bins: int = 10) -> pl.DataFrame:
    """Mean predicted and observed pass rate in equal-width bins of the prediction (rollout-weighted)."""
    if pairs.is_empty():
        return pl.DataFrame({"predicted": [], "observed": [], "n": []})
    n = pairs["n"] if "n" in pairs.columns else pl.Series([1] * pairs.height)
    return (
        pairs.with_columns(n.alias("_w"))
        .with_columns((pl.col("predicted") * bins).floor().clip(0, bins - 1).alias("_bin"))
        .group_by("_bin")
        .agg(
            ((pl.col("predicted") * pl.col("_w")).sum() / pl.col("_w").sum()).alias("predicted"),
            ((pl.col("observed") * pl.col("_w")).sum() / pl.col("_w").sum()).alias("observed"),
            pl.col("_w").sum().alias("n"),
        )
        .sort("_bin")
        .drop("_bin")
    )


def posterior_chart(history: pl.DataFrame, title: str = "posterior pass rate") -> go.Figure:
    """A prompt's Beta posterior mean over steps with a ~90% band (normal approximation), and the
    observed pass rate at each visit (columns step, alpha, beta; optional last_pass, last_step)."""
    if history.is_empty() or "alpha" not in history.columns:
        return empty_figure(title)
    h = history.filter(pl.col("alpha").is_not_null() & pl.col("beta").is_not_null()).sort("step")
    if h.is_empty():
        return empty_figure(title)
    x = h["step"].to_list()
    mean, lo, hi = [], [], []
    for a, b in zip(h["alpha"].to_list(), h["beta"].to_list()):
        m = a / (a + b)
        sd = math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
        mean.append(m)
        lo.append(max(0.0, m - 1.645 * sd))
        hi.append(min(1.0, m + 1.645 * sd))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x + x[::-1], y=hi + lo[::-1], fill="toself", mode="lines", fillcolor="rgba(31,119,180,0.15)",
                             line=dict(width=0), hoverinfo="skip", name="~90% band"))
    fig.add_trace(go.Scatter(x=x, y=mean, mode="lines+markers", name="posterior mean",
                             line=dict(color=PALETTE[0], shape="hv")))
    if "last_pass" in h.columns and "last_step" in h.columns:
        visits = h.filter(pl.col("last_step") == pl.col("step"))
        fig.add_trace(go.Scatter(x=visits["step"].to_list(), y=visits["last_pass"].to_list(), mode="markers",
                                 name="observed at visit", marker=dict(color=PALETTE[1], size=7)))
    layout(fig, title, y="pass rate")
    fig.update_yaxes(range=[-0.02, 1.02])
    return fig


STEP_BAR_WIDTH = 0.8
"""Width of a per-step bar, in steps."""


def grants_chart(grants: pl.DataFrame, title: str = "rollouts granted per step", *,
                 steps_span: tuple[int, int] | None = None) -> go.Figure:
    """Rollouts granted to one prompt per step (all stages), with the number of stages and the
    allocator's reasons on hover (columns step, granted; optional stages, reasons). Each bar is one
    step wide (STEP_BAR_WIDTH) however far apart the visits are; `steps_span` = the run's (first,
    last) step sets the x axis to the whole run."""
    if grants.is_empty():
        return empty_figure(title, "never granted rollouts")
    g = grants.sort("step")
    reasons = g["reasons"].fill_null("").to_list() if "reasons" in g.columns else [""] * g.height
    stages = g["stages"].fill_null(1).to_list() if "stages" in g.columns else [1] * g.height
    fig = go.Figure(go.Bar(
        x=g["step"].to_list(), y=g["granted"].to_list(), name="granted",
        # one step wide whatever the spacing of the visits (Plotly would widen sparse bars to the gap)
        width=[STEP_BAR_WIDTH] * g.height,
        marker_color=[PALETTE[min(int(s), len(PALETTE)) - 1] for s in stages],
        customdata=[[r, s] for r, s in zip(reasons, stages)],
        hovertemplate="step %{x}: %{y} rollouts in %{customdata[1]} stage(s)<br>%{customdata[0]}<extra></extra>",
    ))
    fig.update_layout(hovermode="closest")
    layout(fig, title, y="rollouts (colour: stages)")
    fig.update_xaxes(type="linear")
    if steps_span is not None:
        fig.update_xaxes(range=[steps_span[0] - 0.5, steps_span[1] + 0.5])
    return fig


def pass_rate_chart(visits: pl.DataFrame, title: str = "observed pass rate per visit") -> go.Figure:
    """One prompt's pass rate observed in each step it was visited (columns step, last_pass; optional
    granted): for runs with no per-prompt posterior logged."""
    if visits.is_empty():
        return empty_figure(title, "never visited")
    v = visits.sort("step")
    n = v["granted"].to_list() if "granted" in v.columns else [None] * v.height
    fig = go.Figure(go.Scatter(x=v["step"].to_list(), y=v["last_pass"].to_list(), mode="markers", name="observed",
                               marker=dict(color=PALETTE[1], size=8), customdata=n,
                               hovertemplate="step %{x}: pass rate %{y:.2f} over %{customdata} rollouts<extra></extra>"))
    fig.update_layout(hovermode="closest")
    layout(fig, title, y="pass rate")
    fig.update_yaxes(range=[-0.02, 1.02])
    return fig


def pass_rate_histogram(values: list[float], title: str, *, bins: int = 10) -> go.Figure:
    """How many prompt groups had each observed pass rate (equal-width bins over [0, 1]; 0 and 1 are
    the zero-signal groups of binary rewards)."""
    if not values:
        return empty_figure(title)
    fig = go.Figure(go.Histogram(x=values, xbins=dict(start=0.0, end=1.0 + 1e-9, size=1.0 / bins),
                                 marker_color=PALETTE[0], hovertemplate="%{x}: %{y} groups<extra></extra>"))
    fig.update_layout(hovermode="closest", bargap=0.05)
    layout(fig, title, x="observed pass rate of the group", y="prompts")
    fig.update_xaxes(range=[-0.02, 1.02])
    return fig


def reward_compare_chart(curves: pl.DataFrame, title: str = "training reward vs generated tokens") -> go.Figure:
    """Mean training reward per step of several runs against generated tokens so far (columns run,
    tokens, reward_mean), one line per run."""
    if curves.is_empty() or curves["reward_mean"].drop_nulls().len() == 0:
        return empty_figure(title)
    fig = go.Figure()
    for i, run in enumerate(sorted(curves["run"].unique().to_list())):
        r = curves.filter(pl.col("run") == run).sort("tokens")
        fig.add_trace(go.Scatter(x=r["tokens"].to_numpy(), y=r["reward_mean"].to_numpy(), mode="lines", name=run,
                                 line=dict(color=PALETTE[i % len(PALETTE)])))
    fig.update_layout(hovermode="closest")
    return layout(fig, title, x="generated tokens", y="reward (mean per step)")


def compare_chart(curves: pl.DataFrame, *, x: str, x_title: str, k: int, title: str) -> go.Figure:
    """pass@k of several runs against `x` (columns run, x, k, pass_at_k), one line per run; runs
    with no value of `x` (no step times logged) are left out."""
    sub = curves.filter((pl.col("k") == k) & pl.col(x).is_not_null()) if not curves.is_empty() else curves
    if sub.is_empty():
        return empty_figure(title, "no evaluations in the selected runs")
    fig = go.Figure()
    for i, run in enumerate(sorted(sub["run"].unique().to_list())):
        r = sub.filter(pl.col("run") == run).sort(x)
        fig.add_trace(go.Scatter(x=r[x].to_numpy(), y=r["pass_at_k"].to_numpy(), mode="lines+markers", name=run,
                                 line=dict(color=PALETTE[i % len(PALETTE)])))
    fig.update_layout(hovermode="closest")
    layout(fig, title, x=x_title, y=f"pass@{k}")
    fig.update_yaxes(range=[0, 1.02])
    return fig


def add_attempts(fig: go.Figure, attempts: list[tuple[str, pl.DataFrame]], column: str) -> go.Figure:
    """Draw `column` of each abandoned attempt (steps a guard's rollback left) faded over `fig`."""
    for label, frame in attempts:
        if frame.is_empty() or column not in frame.columns:
            continue
        frame = frame.sort("step")
        fig.add_trace(go.Scatter(x=frame["step"].to_numpy(), y=frame[column].to_numpy(), mode="lines+markers",
                                 name=label, opacity=0.35, line=dict(dash="dot", color="gray"),
                                 marker=dict(size=4, color="gray")))
    return fig
