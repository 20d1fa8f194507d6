"""Click to drill (app/drill.py and the Rollouts page's URL): what a click on a step curve or a histogram
bar means, the histograms' bins, and the Rollouts view in the URL (a link reopens it), through
Streamlit's AppTest on a synthetic store."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import synth  # noqa: E402
from app import drill  # noqa: E402
from workbench.store import open_store  # noqa: E402

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "main.py")


def test_a_click_on_a_step_curve_gives_its_step():
    assert drill.step_of([{"x": 7, "y": 0.5, "curve_number": 0}]) == 7
    assert drill.step_of([{"x": 6.9999999}]) == 7  # plotly's float for an integer axis
    assert drill.step_of([{"y": 1.0}, {"x": 3}]) == 3
    assert drill.step_of([]) is None and drill.step_of([{"x": "a"}]) is None


def test_a_click_on_a_bar_gives_its_bounds():
    fig = drill.bin_chart(drill.bins([0.0, 0.0, 1.0, 0.5], float, count=4), "reward", x="reward")
    data = fig.data[0].customdata
    assert [list(d) for d in data] == [[0.0, 0.25], [0.5, 0.75], [0.75, 1.0]]
    assert list(fig.data[0].y) == [2, 1, 1]
    assert drill.bin_of([{"x": 0.125, "customdata": list(data[0])}]) == (0.0, 0.25)
    assert drill.bin_of([{"x": 1}]) is None


def test_bar_charts_that_drill_hover_the_closest_bar():
    """Under the dashboard's "x unified" hover plotly selects no bar on a click (seen in Chromium: its
    `plotly_selected` event came with no point), so a chart whose bars drill hovers the closest one."""
    import polars as pl

    from app import charts, pipeline_charts

    used = pl.DataFrame({"step": [0, 1], "stage": [0, 0], "granted": [8, 8], "budget": [8, 8]})
    lanes = pl.DataFrame({"step": [1], "worker": ["trainer"], "phase": ["train"], "start": [0.0], "end": [1.0],
                          "seconds": [1.0]})
    for fig in (drill.bin_chart([(0.0, 1.0, 3)], "reward", x="reward"), charts.budget_chart(used),
                pipeline_charts.lanes_chart(lanes)):
        assert fig.layout.hovermode == "closest" and fig.layout.clickmode == "event+select"


def test_integer_bins_are_whole_numbers_and_hold_every_value():
    values = [1, 2, 2, 3, 40, 41]
    binned = drill.bins(values, int, count=20)
    assert all(a == int(a) and b == int(b) and a <= b for a, b, _ in binned)
    assert sum(n for _, _, n in binned) == len(values)
    for a, b, n in binned:  # the page filters `length >= a and length <= b`: each bar is its rows
        assert n == sum(a <= v <= b for v in values)
    assert drill.bins([5, 5], int) == [(5.0, 5.0, 2)]
    assert drill.bins([], float) == [] and drill.bins([0.3, 0.3], float) == [(0.3, 0.3, 2)]


def test_the_view_round_trips_through_the_url():
    filters = {"prompt": "p-1", "verdict": "correct", "reward_min": 0.1 + 0.2, "length_max": 4}
    params = drill.encode("run-a", (3, 5), filters)
    assert params["run"] == "run-a" and params["steps"] == "3-5"
    back = drill.parse(params)
    assert back["steps"] == (3, 5) and back["reward_min"] == 0.1 + 0.2  # exact: the bin's edge is kept
    assert {k: back[k] for k in filters} == filters
    assert drill.parse({"step": "7"})["steps"] == (7, 7)
    assert drill.parse({"step": "x", "reward_min": "nan", "length_min": "2.5"}) == {}  # bad values: defaults


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("drill") / "store"
    return path, synth.fill(path, steps=4)


def _rollouts(lake, monkeypatch, **params):
    import streamlit as st

    monkeypatch.setenv("WORKBENCH_STORE", str(lake[0]))
    st.cache_data.clear()
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update(params)
    at.run()
    at.switch_page("app_pages/rollouts.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_link_with_a_step_and_a_bin_opens_those_rollouts(lake, monkeypatch):
    path, ids = lake
    with open_store(path) as store:
        want = store.count_rollouts(ids[0], step_min=3, step_max=3, length_min=2, length_max=3)
        every = store.count_rollouts(ids[0], step_min=3, step_max=3)
    assert 0 < want < every
    at = _rollouts(lake, monkeypatch, run=ids[0], step="3", length_min="2", length_max="3")
    assert at.selectbox(key="rollouts_run").value == ids[0]
    assert at.slider(key="rollouts_steps").value == (3, 3)
    assert at.number_input(key="rollouts_length_min").value == 2
    assert at.text[0].value.startswith(f"{want} rollouts match")


def test_a_histogram_bar_becomes_the_filter_and_the_url(lake, monkeypatch):
    """What a click on a bar of the length histogram does (the page's `rollouts_drill`), then its URL."""
    path, ids = lake
    at = _rollouts(lake, monkeypatch, run=ids[0], step="3")
    at.session_state["rollouts_drill"] = ("length", 1.0, 2.0, int)
    at.run()
    assert not at.exception
    with open_store(path) as store:
        want = store.count_rollouts(ids[0], step_min=3, step_max=3, length_min=1, length_max=2)
    assert at.text[0].value.startswith(f"{want} rollouts match")
    assert at.number_input(key="rollouts_length_max").value == 2
    assert at.session_state["rollouts_url"] == repr((ids[0], sorted({
        "step": None, "steps": "3-3", "prompt": None, "verdict": None, "reward_min": None, "reward_max": None,
        "length_min": "1", "length_max": "2", "entropy_min": None, "entropy_max": None}.items())))
    reopened = _rollouts(lake, monkeypatch, **drill.encode(ids[0], (3, 3), {"length_min": 1, "length_max": 2}))
    assert reopened.text[0].value == at.text[0].value  # the URL written reopens the same view


def test_the_histograms_count_the_step_ranges_rollouts(lake, monkeypatch):
    import json

    path, ids = lake
    at = _rollouts(lake, monkeypatch, run=ids[0], step="3")
    assert not at.get("plotly_chart")  # off by default: no read the page did not make before
    at.toggle(key="rollouts_hists").set_value(True).run()
    assert not at.exception
    charts = at.get("plotly_chart")
    assert len(charts) == 3
    with open_store(path) as store:
        n = store.count_rollouts(ids[0], step_min=3, step_max=3)
    for chart in charts:
        bars = json.loads(chart.proto.spec)["data"][0]
        assert sum(bars["y"]) == n and len(bars["customdata"]) == len(bars["y"])


def test_an_alerts_link_keeps_its_alert_and_writes_the_widgets_view(lake, monkeypatch):
    """The Alerts page's link (`?run=&steps=a-b&alert=ID`): the page filters on the alert alone, and the
    URL it writes keeps the alert beside the widgets' view (an alert's filter has no reward bounds)."""
    path, ids = lake
    at = _rollouts(lake, monkeypatch, run=ids[0], steps="1-2", alert="no-such-alert")
    assert at.text[0].value.startswith("0 rollouts match") and "alert no-such-alert" in at.text[0].value
    assert at.slider(key="rollouts_steps").value == (1, 2)
