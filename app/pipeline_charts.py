"""The Run page's asynchronous-pipeline panels as pure chart builders: frames of
`workbench.analysis.pipeline` in, Plotly figures out (no Streamlit, no store; tests/app/test_pipeline_view.py).

- the pipeline timeline: per step, the generator's and the trainer's busy and idle seconds, side by side;
- the staleness histogram of the rollouts the trainer consumed;
- the off-policy correction's curves: importance weight (mean, max, the cap), clipped / truncated
  shares and the effective sample size, the k3 estimate of KL(behaviour || trainer).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from app.charts import PALETTE, NOT_LOGGED, empty_figure, layout, line_chart, mark_regimes

SIDES = [("generator", "generator", PALETTE[0], "rgba(31,119,180,0.3)"),
         ("trainer", "trainer", PALETTE[1], "rgba(214,39,40,0.3)")]
"""(column prefix in `pipeline_by_step`, label, busy colour, idle colour: the same, pale) of the
timeline's two bars per step."""


def timeline_chart(frame: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """Per step two bars, the generator's and the trainer's, each its busy seconds (solid) under its
    idle seconds (pale): where the pipeline waited, step by step. `frame` as `pipeline_by_step`."""
    title = "pipeline timeline: busy and idle seconds per step"
    if frame.is_empty():
        return empty_figure(title)
    cols = [f"{side}_{kind}_s" for side, *_ in SIDES for kind in ("busy", "idle")]
    if not any(frame[c].drop_nulls().len() for c in cols):
        return empty_figure(title, NOT_LOGGED)
    f = frame.sort("step")
    x = f["step"].to_numpy()
    fig = go.Figure()
    for side, label, colour, pale in SIDES:
        busy = f[f"{side}_busy_s"].fill_null(0.0).to_numpy()
        idle = f[f"{side}_idle_s"].fill_null(0.0).to_numpy()
        # one offset group per side: its idle bar starts where its busy bar ends (stacked by hand, so
        # the two sides stand side by side at each step)
        fig.add_trace(go.Bar(x=x, y=busy, name=f"{label} busy", offsetgroup=side, marker_color=colour,
                             hovertemplate=f"step %{{x}}: {label} busy %{{y:.3f}} s<extra></extra>"))
        fig.add_trace(go.Bar(x=x, y=idle, base=busy, name=f"{label} idle", offsetgroup=side,
                             marker_color=pale,
                             hovertemplate=f"step %{{x}}: {label} idle %{{y:.3f}} s<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.15, bargroupgap=0.05, hovermode="closest")
    layout(fig, title, y="seconds")
    return mark_regimes(fig, changes or [])


def staleness_chart(hist: pl.DataFrame) -> go.Figure:
    """Rollouts the trainer consumed at each staleness (versions behind it), one bar per version;
    `hist` as `staleness_histogram` (columns staleness, rollouts)."""
    title = "staleness of the rollouts consumed"
    if hist.is_empty():
        return empty_figure(title, "no rollouts recorded yet")
    total = max(int(hist["rollouts"].sum()), 1)
    shares = [100.0 * n / total for n in hist["rollouts"].to_list()]
    fig = go.Figure(go.Bar(x=hist["staleness"].to_list(), y=hist["rollouts"].to_list(), marker_color=PALETTE[0],
                           customdata=shares,
                           hovertemplate="staleness %{x}: %{y} rollouts (%{customdata:.1f}%)<extra></extra>"))
    fig.update_layout(hovermode="closest", bargap=0.2)
    layout(fig, title, x="staleness (versions behind the trainer)", y="rollouts")
    fig.update_xaxes(dtick=1)
    return fig


def logged(frame: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
    """The steps of `frame` that logged any of `columns` (the correction's diagnostics come from steps
    that updated the policy only): their curves join those steps instead of breaking at the others."""
    present = [c for c in columns if c in frame.columns]
    if frame.is_empty() or not present:
        return frame
    return frame.filter(pl.any_horizontal([pl.col(c).is_not_null() for c in present]))


def weight_chart(frame: pl.DataFrame, cap: float | None = None, *, changes: list[dict] | None = None) -> go.Figure:
    """The importance weight over the stale tokens per step (mean and max), with the cap `is_cap` the
    decoupled correction truncates at as a dashed line."""
    fig = line_chart(logged(frame, ["is_weight_mean", "is_weight_max"]), [("is_weight_mean", "mean"),
                                                                          ("is_weight_max", "max")],
                     "importance weight (stale tokens)", y="pi_trainer / pi_behaviour", changes=changes)
    if cap is not None and fig.data:
        fig.add_hline(y=cap, line=dict(color="#888", dash="dash", width=1),
                      annotation_text=f"is_cap {cap:g}", annotation_position="top left")
    return fig


def clip_chart(frame: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """Per step: the share of tokens the PPO clip bound, the share of stale tokens whose weight was
    truncated at `is_cap`, and the weights' effective sample size as a share of the stale tokens."""
    series = [("clip_frac", "clipped"), ("is_truncated_frac", "truncated at is_cap"), ("ess_frac", "ESS / tokens")]
    return line_chart(logged(frame, [c for c, _ in series]), series,
                      "clip, truncation and effective sample size", y="fraction", changes=changes,
                      y_range=(-0.02, 1.02))


def kl_chart(frame: pl.DataFrame, *, changes: list[dict] | None = None) -> go.Figure:
    """The k3 estimate of KL(behaviour || trainer) per step, over the stale tokens (0 at a step that
    consumed none)."""
    return line_chart(logged(frame, ["kl_behav_k3"]), [("kl_behav_k3", "k3")], "KL(behaviour ‖ trainer), k3 estimate",
                      y="nats", changes=changes)


LANE_COLOURS = {"generate": PALETTE[0], "allocate": "#9ecae1", "verify": "#6baed6", "train": PALETTE[1],
                "weight_sync": "#2ca02c", "eval": "#9467bd", "log": "#8c564b", "idle": "#d9d9d9",
                "restart": "#d62728"}
"""Phase -> colour in the lanes; a phase not named here gets grey."""


def lanes_chart(lanes: pl.DataFrame) -> go.Figure:
    """One lane per worker (trainer, generator, Ray workers ray-<i>): a bar per step and phase from its first start to its last
    end, coloured by phase (idle pale), longer spans under shorter ones; the step, the seconds inside, the
    start and the end in each bar's
    customdata (a click opens that step: `app.drill.lane_step_of`). `lanes` as
    `workbench.analysis.pipeline.worker_lanes`."""
    title = "per-worker lanes: what each worker did, step by step (seconds)"
    if lanes.is_empty():
        return empty_figure(title, NOT_LOGGED)
    fig = go.Figure()
    workers = sorted(lanes["worker"].unique().to_list(), key=lambda w: (w != "generator", w))
    # overlaid, longest spans first: a phase spanning others (allocate before and after a stage's generate)
    # stays under them instead of hiding them
    spans = lanes.group_by("phase").agg((pl.col("end") - pl.col("start")).mean().alias("span"))
    order = spans.sort(["span", "phase"], descending=[True, False])["phase"].to_list()
    for phase in order:
        sub = lanes.filter(pl.col("phase") == phase)
        fig.add_trace(go.Bar(
            y=sub["worker"].to_list(), x=(sub["end"] - sub["start"]).clip(lower_bound=1e-3).to_list(),
            base=sub["start"].to_list(), orientation="h", name=phase,
            marker_color=LANE_COLOURS.get(phase, "#7f7f7f"), marker_line_width=0.5, marker_line_color="#fff",
            customdata=[list(r) for r in zip(sub["step"].to_list(), sub["seconds"].fill_null(0.0).to_list(),
                                             sub["start"].to_list(), sub["end"].to_list())],
            hovertemplate=f"step %{{customdata[0]}} · {phase}: %{{customdata[1]:.3f}} s inside "
                          "%{customdata[2]:.2f}–%{customdata[3]:.2f} s<extra>%{y}</extra>"))
    fig.update_layout(barmode="overlay", yaxis=dict(categoryorder="array", categoryarray=workers[::-1]),
                      clickmode="event+select")
    fig = layout(fig, title, x="seconds from the first step shown", y="worker", height=120 + 60 * len(workers))
    fig.layout.hovermode = "closest"  # one bar's phase and step, not every bar at that time
    return fig
