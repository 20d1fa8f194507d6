"""The asynchronous pipeline on the dashboard without an engine: the chart builders and the token
colouring on hand-made frames, the store's staleness reader and filter on a store written through the
writer API, and the Run and Rollouts pages (AppTest) on a pipelined, a synchronous and an imported run:
the panels for the first, one line for the second, nothing for the third."""

from __future__ import annotations

import polars as pl
import pytest

import synth
from apptest import goto
from app import drill, pipeline_charts, rollout_view
from workbench.analysis.pipeline import pipeline_by_step, staleness_histogram, worker_lanes
from workbench.store import StepRecord, open_store

STALENESS = [0, 0, 1, 1, 1, 2]  # of the six rollouts of every step


def _pipelined_run(store) -> str:
    """Three steps as a pipelined run records them (docs/async.md, "What is recorded")."""
    cfg = {"allocator": {"name": "uniform", "params": {}}, "steps": 3,
           "pipeline": {"max_staleness": 2, "correction": "decoupled", "correction_level": "token", "is_cap": 2.0}}
    rid = store.create_run("synth-async", cfg, seed=0, status="finished")
    for step in (1, 2, 3):
        rows = [{"stage": 0, "prompt_id": f"p{i // 3}", "idx": i % 3, "response": "12", "reward": float(i % 2),
                 "verdict": "wrong", "length": 2, "token_ids": [5, 6], "token_entropy": [0.5, 0.1],
                 "token_logprobs": [-0.5, -0.1], "token_trainer_logprobs": [-0.25, -0.9] if s else [-0.5, -0.1],
                 "used_in_update": True, "version_start": step - 1 - s, "version_end": step - 1 - s + (i == 5),
                 "segments": 1 + (i == 5), "staleness": s, "is_weight_mean": 1.0 if s == 0 else 0.8}
                for i, s in enumerate(STALENESS)]
        metrics = {"rollout/count": 6, "rollout/reward_mean": 0.5, "timing_s/step": 1.0,
                   "timing_s/generator_busy": 0.3, "timing_s/generator_idle": 0.6, "timing_s/trainer_busy": 0.9,
                   "timing_s/trainer_idle": 0.1, "rollout/staleness_mean": 1.0, "rollout/staleness_max": 2,
                   "train/clip_frac": 0.02, "train/is_weight_mean": 0.95, "train/is_weight_max": 2.0,
                   "train/is_truncated_frac": 0.04, "train/kl_behav_k3": 0.012 * step, "train/ess_frac": 0.9,
                   **_lanes(step)}
        store.write_step(StepRecord(rid, step, metrics, rows))
    return rid


T0 = 1_790_000_000.0
"""An epoch second: lanes are stored in seconds since the epoch."""


def _lanes(step: int) -> dict[str, float]:
    """Step `step`'s lanes: the generator made its batch in [step - 1, step - 0.7) and waited, the trainer
    waited 0.1 s, then trained for 0.8 s (float32-exact numbers)."""
    spans = {("generator", "generate"): (step - 1.0, step - 0.75), ("generator", "idle"): (step - 0.75, step),
             ("trainer", "idle"): (step, step + 0.125), ("trainer", "train"): (step + 0.125, step + 0.875)}
    out = {}
    for (worker, phase), (a, b) in spans.items():
        out.update({f"lane/{worker}/{phase}/start": T0 + a, f"lane/{worker}/{phase}/end": T0 + b,
                    f"lane/{worker}/{phase}/s": b - a})
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("pipeline-view") / "store"
    sync_id = synth.fill(path, runs=("uniform",), steps=3)[0]
    imported = synth.fill_imported(path, steps=3)
    with open_store(path) as st:
        rid = _pipelined_run(st)
    return path, {"async": rid, "sync": sync_id, "imported": imported}


def test_the_reader_counts_and_filters_rollouts_by_staleness(lake):
    path, ids = lake
    with open_store(path) as st:
        counts = st.staleness_counts(ids["async"])
        assert counts.to_dicts() == [{"staleness": 0, "rollouts": 6}, {"staleness": 1, "rollouts": 9},
                                     {"staleness": 2, "rollouts": 3}]
        assert st.count_rollouts(ids["async"], staleness_min=1) == 12
        assert st.count_rollouts(ids["async"], staleness_min=1, staleness_max=1) == 9
        page = st.rollouts(ids["async"], staleness_max=0, limit=100)
        assert page.height == 6 and set(page["staleness"]) == {0}
        assert st.staleness_counts(ids["imported"]).is_empty()  # imported runs recorded none


def test_the_timeline_stacks_idle_on_busy_for_each_side(lake):
    path, ids = lake
    with open_store(path) as st:
        frame = pipeline_by_step(st.run_steps(ids["async"]))
    fig = pipeline_charts.timeline_chart(frame)
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"generator busy", "generator idle", "trainer busy", "trainer idle"}
    assert list(bars["generator idle"].base) == list(bars["generator busy"].y) == [0.3] * 3
    assert list(bars["trainer idle"].y) == [0.1] * 3 and bars["trainer idle"].offsetgroup == "trainer"
    assert not pipeline_charts.timeline_chart(frame.clear()).data  # an empty frame: a titled empty figure


def test_the_correction_curves_and_the_histogram_carry_the_values(lake):
    path, ids = lake
    with open_store(path) as st:
        frame = pipeline_by_step(st.run_steps(ids["async"]))
        hist = staleness_histogram(st.staleness_counts(ids["async"]))
    bar = pipeline_charts.staleness_chart(hist).data[0]
    assert list(bar.x) == [0, 1, 2] and list(bar.y) == [6, 9, 3]
    weight = pipeline_charts.weight_chart(frame, 2.0)
    assert [t.name for t in weight.data] == ["mean", "max"]
    assert [s.y0 for s in weight.layout.shapes] == [2.0]  # the cap
    clip = {t.name: list(t.y) for t in pipeline_charts.clip_chart(frame).data}
    assert clip == {"clipped": [0.02] * 3, "truncated at is_cap": [0.04] * 3, "ESS / tokens": [0.9] * 3}
    kl = pipeline_charts.kl_chart(frame).data[0]
    assert [round(v, 6) for v in kl.y] == [0.012, 0.024, 0.036]
    # a step that did not update logs no diagnostics: the curve joins the steps that did
    gap = frame.with_columns(pl.when(pl.col("step") == 2).then(None).otherwise(pl.col("kl_behav_k3")).alias("kl_behav_k3"))
    assert list(pipeline_charts.kl_chart(gap).data[0].x) == [1, 3]


def test_the_lanes_put_each_workers_phases_in_time_from_the_first_shown(lake):
    path, ids = lake
    with open_store(path) as st:
        steps = st.run_steps([ids["async"]])
        sync_steps = st.run_steps([ids["sync"]])
    lanes = worker_lanes(steps, last=2)  # steps 2 and 3: time counts from step 2's generator start
    assert lanes["step"].unique().sort().to_list() == [2, 3]
    assert set(zip(lanes["worker"], lanes["phase"])) == {("generator", "generate"), ("generator", "idle"),
                                                         ("trainer", "idle"), ("trainer", "train")}
    row = lanes.filter((pl.col("step") == 3) & (pl.col("phase") == "train")).row(0, named=True)
    assert (row["worker"], row["start"], row["end"], row["seconds"]) == ("trainer", 2.125, 2.875, 0.75)
    assert lanes["start"].min() == 0.0 and worker_lanes(sync_steps).is_empty()
    fig = pipeline_charts.lanes_chart(lanes)
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"generate", "idle", "train"} and all(t.orientation == "h" for t in fig.data)
    assert [t.name for t in fig.data] == ["train", "idle", "generate"]  # longest mean span (0.75, 0.44, 0.25) first
    train = bars["train"]
    assert list(train.y) == ["trainer", "trainer"] and list(train.base) == [1.125, 2.125]
    assert [c[0] for c in train.customdata] == [2, 3] and list(train.x) == [0.75, 0.75]
    assert drill.lane_step_of([{"x": 0.75, "customdata": list(train.customdata[1])}]) == 3
    assert pipeline_charts.lanes_chart(worker_lanes(sync_steps)).layout.annotations  # "not logged"


def test_version_span_and_the_gap_colouring():
    assert rollout_view.version_span({"version_start": 3, "version_end": 3, "segments": 1}) == "v3"
    assert rollout_view.version_span({"version_start": 3, "version_end": 4, "segments": 2}) == "v3→v4 (2 segments)"
    assert rollout_view.version_span({"version_start": None}) == "–"
    assert rollout_view.gap_scale([0.001, None, -0.002]) == rollout_view.GAP_FLOOR  # float rounding stays white
    assert rollout_view.gap_scale([0.5, -1.0]) == 0.5  # 98th percentile of |gap| (index 0 of two)
    out = rollout_view.token_html(["<a>", "b"], [0.1, 0.2], gaps=[-0.25, None], gap_max=0.25)
    assert "&lt;a&gt;" in out and "trainer − behaviour = -0.2500 nats" in out
    assert "background:rgb(255,100,100)" in out  # the full red of the scale: the trainer finds it less likely
    assert "trainer log-prob not stored" in out and "background:rgb(235,235,235)" in out
    rows = [{"idx": 0, "response": "ab", "token_ids": [5, 6], "token_logprobs": [-0.5, -0.1], "token_trainer_logprobs": [-0.25, -0.1],
             "version_start": 1, "version_end": 2, "segments": 2, "staleness": 1, "is_weight_mean": 0.8}]
    table = rollout_view.group_html(rows, pipelined=True, gap_max=0.25)
    assert "v1→v2 (2 segments)" in table and "IS weight" in table and "trainer − behaviour = +0.2500" in table
    assert "versions" not in rollout_view.group_html(rows) and "H=" not in rollout_view.group_html(rows)


@pytest.fixture
def at(app):
    return app  # the dashboard on `lake` (tests/app/conftest.py)


def _live(at, run_id):
    goto(at, "live").selectbox(key="live_run").set_value(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_run_page_shows_the_panels_of_a_pipelined_run_only(at, lake):
    _, ids = lake
    page = _live(at, ids["async"])
    assert "Asynchronous pipeline" in [s.value for s in page.subheader]
    shown = {m.label: m.value for m in page.metric}
    assert shown["max staleness (config)"] == "2" and shown["staleness now (max)"] == "2"
    assert shown["trainer idle"] == "10%" and shown["generator idle"] == "67%"
    page = _live(at, ids["sync"])
    assert "Asynchronous pipeline" not in [s.value for s in page.subheader]
    assert sum(c.value.startswith("Synchronous run") for c in page.caption) == 1
    page = _live(at, ids["imported"])
    assert "Asynchronous pipeline" not in [s.value for s in page.subheader]
    assert not any(c.value.startswith("Synchronous run") for c in page.caption)


def test_the_rollouts_page_filters_by_staleness_and_colours_by_the_gap(at, lake):
    _, ids = lake
    at.switch_page("app_pages/rollouts.py").run()
    at.selectbox(key="rollouts_run").set_value(ids["async"]).run()
    assert [t.value for t in at.text if "rollouts match" in t.value][0].startswith("6 rollouts match")
    at.slider(key="rollouts_staleness").set_value((1, 2)).run()
    assert [t.value for t in at.text if "rollouts match" in t.value][0].startswith("4 rollouts match")
    at.radio(key="rollouts_colour").set_value("trainer − behaviour log-prob").run()
    assert not at.exception, [e.value for e in at.exception]
    body = "".join(h.proto.body for h in at.get("html"))
    assert "v0→v1 (2 segments)" in body and "trainer − behaviour = +0.2500 nats" in body
    at.selectbox(key="rollouts_run").set_value(ids["sync"]).run()  # no pipeline: no filter, no span
    assert not [s for s in at.slider if s.key == "rollouts_staleness"]
    assert "versions" not in "".join(h.proto.body for h in at.get("html"))
