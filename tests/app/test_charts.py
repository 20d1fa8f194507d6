"""The pure chart builders: the data in the frame reaches the figure's traces."""

import polars as pl

from app import charts

STEPS = pl.DataFrame({
    "run_id": ["r"] * 4,
    "step": [0, 1, 2, 3],
    "reward_mean": [0.2, 0.3, 0.35, 0.5],
    "reward_std": [0.1, 0.1, 0.1, 0.1],
    "entropy_mean": [1.0, 0.9, 0.8, 0.7],
    "zero_signal_frac": [0.5, 0.4, 0.3, 0.2],
    "rollouts": [64, 64, 32, 32],
    "tokens_generated": [640, 600, 300, 280],
    "time_generate_s": [0.2, 0.2, 0.1, 0.1],
    "time_verify_s": [0.01] * 4,
    "time_train_s": [0.5] * 4,
    "time_log_s": [0.05] * 4,
    "budget": [64, 64, 32, 32],
    "budget_kind": ["rollouts"] * 4,
    "allocator": ["uniform", "uniform", "uniform", "multistage"],
})


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def test_line_chart_carries_values_and_regime_marks():
    changes = [{"step": 2, "label": "budget 32 rollouts"}, {"step": 3, "label": "allocator multistage"}]
    fig = charts.line_chart(STEPS, [("reward_mean", "reward mean")], "reward", changes=changes,
                            band=("reward_mean", "reward_std"))
    t = _trace(fig, "reward mean")
    assert list(t.y) == [0.2, 0.3, 0.35, 0.5]
    assert "allocator uniform · budget 64 rollouts" == t.customdata[0]
    assert [s.x0 for s in fig.layout.shapes] == [2, 3]
    assert {a.text for a in fig.layout.annotations} == {"budget 32 rollouts", "allocator multistage"}
    band = _trace(fig, "±1 std")
    assert max(band.y) == 0.6 and min(band.y) == 0.1


def test_empty_frames_give_a_titled_empty_figure():
    fig = charts.line_chart(pl.DataFrame(), [("reward_mean", "r")], "reward")
    assert fig.layout.title.text == "reward"
    assert fig.layout.annotations[0].text == "no data yet"
    assert len(fig.data) == 0
    assert charts.passk_chart(pl.DataFrame()).layout.annotations[0].text == "no evaluations yet"


def test_passk_chart_one_line_per_k():
    pk = pl.DataFrame({"step": [0, 0, 5, 5], "k": [1, 4, 1, 4], "pass_at_k": [0.3, 0.6, 0.4, 0.7]})
    fig = charts.passk_chart(pk)
    assert [t.name for t in fig.data] == ["pass@1", "pass@4"]
    ci = pk.with_columns((pl.col("pass_at_k") - 0.1).alias("ci_low"), (pl.col("pass_at_k") + 0.1).alias("ci_high"))
    fig = charts.passk_chart(ci)
    assert [t.name for t in fig.data] == ["pass@1 95% CI", "pass@1", "pass@4 95% CI", "pass@4"]
    assert abs(max(_trace(fig, "pass@4 95% CI").y) - 0.8) < 1e-12
    assert list(_trace(fig, "pass@4").y) == [0.6, 0.7]


def test_entropy_chart_adds_quantiles():
    q = pl.DataFrame({"step": [0, 0, 1, 1], "q": ["p10", "p90", "p10", "p90"], "value": [0.1, 2.0, 0.2, 1.8]})
    fig = charts.entropy_chart(STEPS, q)
    assert list(_trace(fig, "p90").y) == [2.0, 1.8]
    assert list(_trace(fig, "mean").y) == [1.0, 0.9, 0.8, 0.7]
    q3 = pl.concat([q, pl.DataFrame({"step": [0, 1], "q": ["p50", "p50"], "value": [1.0, 1.0]})])
    fig = charts.entropy_chart(STEPS, q3)
    assert [t.name for t in fig.data if t.name.startswith("p")] == ["p10", "p90", "p50"]
    assert _trace(fig, "p90").fill == "tonexty" and _trace(fig, "p50").fill is None


def test_time_and_throughput():
    fig = charts.stacked_time_chart(STEPS)
    assert [t.name for t in fig.data] == ["generate", "verify", "train", "log"]
    assert fig.layout.barmode == "stack"
    fig = charts.throughput_chart(STEPS)
    assert list(_trace(fig, "tokens").y) == [640, 600, 300, 280]
    assert _trace(fig, "tokens").yaxis == "y2"


def test_budget_chart_stacks_stages_under_budget_line():
    used = pl.DataFrame({"step": [0, 0, 1], "stage": [0, 1, 0], "granted": [48, 16, 64], "budget": [64, 64, 64]})
    fig = charts.budget_chart(used)
    assert list(_trace(fig, "stage 1").y) == [16]
    assert list(_trace(fig, "budget").y) == [64, 64]


def test_histogram_counts_values():
    fig = charts.histogram_chart([8, 8, 8, 16, 24], "h", x="rollouts")
    assert list(fig.data[0].x) == [8, 16, 24]
    assert list(fig.data[0].y) == [3, 1, 1]


def test_calibration_bins_are_rollout_weighted():
    pairs = pl.DataFrame({"predicted": [0.12, 0.18, 0.9], "observed": [0.0, 1.0, 1.0], "n": [1, 3, 8]})
    b = charts.calibration_bins(pairs)
    assert b["n"].to_list() == [4, 8]
    assert abs(b["observed"][0] - 0.75) < 1e-12
    fig = charts.calibration_chart(pairs)
    assert list(_trace(fig, "groups").x) == [0.12, 0.18, 0.9]


def test_posterior_band_and_visits():
    h = pl.DataFrame({"step": [0, 1, 2], "alpha": [2.0, 2.0, 6.0], "beta": [8.0, 8.0, 8.0],
                      "last_step": [0, 0, 2], "last_pass": [0.125, 0.125, 0.5]})
    fig = charts.posterior_chart(h)
    assert list(_trace(fig, "posterior mean").y) == [0.2, 0.2, 6 / 14]
    assert list(_trace(fig, "observed at visit").x) == [0, 2]
    band = _trace(fig, "~90% band")
    assert all(0.0 <= y <= 1.0 for y in band.y)


def test_grants_and_compare():
    g = pl.DataFrame({"step": [5, 3], "stages": [1, 2], "granted": [8, 24], "reasons": ["base", "base | hard: 0/8"]})
    fig = charts.grants_chart(g)
    assert list(fig.data[0].x) == [3, 5] and list(fig.data[0].y) == [24, 8]
    assert [list(c) for c in fig.data[0].customdata] == [["base | hard: 0/8", 2], ["base", 1]]
    curves = pl.DataFrame({"run": ["a", "a", "b"], "tokens": [10, 20, 15], "wall_s": [1.0, 2.0, 1.5],
                           "k": [1, 1, 1], "pass_at_k": [0.2, 0.3, 0.25], "step": [0, 1, 0]})
    fig = charts.compare_chart(curves, x="tokens", x_title="t", k=1, title="c")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(_trace(fig, "a").x) == [10, 20]
    assert charts.compare_chart(curves, x="tokens", x_title="t", k=8, title="c").layout.annotations[0].text \
        == "no evaluations in the selected runs"


def test_grant_bars_are_one_step_wide_however_sparse_the_visits():
    sparse = pl.DataFrame({"step": [0, 3, 200, 240], "granted": [8, 8, 16, 8], "stages": [1, 1, 2, 1],
                           "reasons": ["a", "b", "c", "d"]})
    fig = charts.grants_chart(sparse, steps_span=(0, 240))
    bar = fig.data[0]
    assert list(bar.x) == [0, 3, 200, 240] and list(bar.y) == [8, 8, 16, 8]
    assert list(bar.width) == [charts.STEP_BAR_WIDTH] * 4 and charts.STEP_BAR_WIDTH <= 1.0
    assert fig.layout.xaxis.type == "linear" and list(fig.layout.xaxis.range) == [-0.5, 240.5]


def test_a_value_the_run_never_logged_says_so():
    imported = STEPS.with_columns(pl.lit(None, dtype=pl.Float64).alias(c) for c in
                                  ["entropy_mean", "time_generate_s", "time_verify_s", "time_train_s", "time_log_s"])
    for fig in (charts.line_chart(imported, [("entropy_mean", "mean")], "entropy"),
                charts.stacked_time_chart(imported)):
        assert not fig.data and fig.layout.annotations[0].text == charts.NOT_LOGGED
    assert charts.line_chart(STEPS.clear(), [("entropy_mean", "mean")], "e").layout.annotations[0].text == "no data yet"


def test_pass_rate_charts_carry_the_observed_rates():
    visits = pl.DataFrame({"step": [0, 11], "granted": [4, 8], "last_pass": [0.25, 0.75]})
    fig = charts.pass_rate_chart(visits)
    assert list(fig.data[0].x) == [0, 11] and list(fig.data[0].y) == [0.25, 0.75]
    hist = charts.pass_rate_histogram([0.0, 0.0, 0.5, 1.0], "h")
    assert list(hist.data[0].x) == [0.0, 0.0, 0.5, 1.0] and hist.data[0].xbins.size == 0.1
    curves = pl.DataFrame({"run": ["a", "a", "b"], "tokens": [10, 20, 15], "reward_mean": [0.1, 0.2, 0.3]})
    fig = charts.reward_compare_chart(curves)
    assert {t.name: list(t.y) for t in fig.data} == {"a": [0.1, 0.2], "b": [0.3]}


def test_compare_chart_leaves_out_runs_without_the_axis():
    curves = pl.DataFrame({"run": ["ours", "ours", "verl"], "step": [0, 2, 0], "tokens": [10, 20, 30],
                           "wall_s": [1.0, 2.0, None], "k": [1, 1, 1], "pass_at_k": [0.1, 0.2, 0.3]})
    on_wall = charts.compare_chart(curves, x="wall_s", x_title="s", k=1, title="t")
    assert [t.name for t in on_wall.data] == ["ours"]
    on_tokens = charts.compare_chart(curves, x="tokens", x_title="tokens", k=1, title="t")
    assert sorted(t.name for t in on_tokens.data) == ["ours", "verl"]


def test_a_legend_of_long_names_goes_below_the_plot():
    import plotly.graph_objects as go

    short = charts.layout(go.Figure([go.Scatter(y=[1], name="pass@1"), go.Scatter(y=[1], name="pass@8")]), "t")
    assert short.layout.legend.y == 1.0 and short.layout.height == 300, "two short entries fit beside the title"
    runs = [f"organism-{a} · finished · 114416-6e32" for a in ("uniform", "selective")]
    long = charts.layout(go.Figure([go.Scatter(y=[1], name=n) for n in runs]), "t")
    assert long.layout.legend.y < 0 and long.layout.height > 300, "two run names would cover the title"
    many = charts.layout(go.Figure([go.Scatter(y=[1], name=str(i)) for i in range(5)]), "t")
    assert many.layout.legend.y < 0
