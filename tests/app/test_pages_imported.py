"""Every page on a run imported from another engine (as `workbench import` writes it: `runs.source`
set, status "imported", metrics computed from the rollouts, no allocations, no prompt_stats, the
engine's own columns null) beside two runs of ours: no exception, each page says what the source did
not log and shows what the rollouts tell, and nothing offers to steer the imported run."""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("streamlit")

import synth  # noqa: E402
from apptest import goto, open_app  # noqa: E402
from workbench.store import open_store  # noqa: E402

SPARSE = "p07"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("imported") / "store"
    ours = synth.fill(path, steps=4)
    imported = synth.fill_imported(path, steps=12, sparse=(SPARSE,))
    return path, ours, imported


@pytest.fixture
def app(lake, monkeypatch):
    """The dashboard opened on the imported run (`?run=`)."""
    return open_app(lake[0], monkeypatch, query={"run": lake[2]})


def metrics(at):
    return {m.label: m.value for m in at.metric}


def test_runs_page_shows_each_runs_source_and_no_controls_for_the_imported_one(app, lake):
    _, ours, imported = lake
    table = app.dataframe[0].value
    source = dict(zip(table["run_id"], table["source"]))
    assert source[imported] == "verl"
    assert {source[r] for r in ours} == {"workbench"}
    assert not [b for b in app.button if b.label in ("Pause", "Resume", "Stop")]
    assert any("imported from verl" in c.value and "read-only" in c.value for c in app.caption)


def test_live_page_shows_the_curves_and_offers_no_controls(app, lake):
    path, _, imported = lake
    goto(app, "live", no_error=True)
    m = metrics(app)
    with open_store(path) as store:
        last = store.run_steps(imported).sort("step").tail(1).to_dicts()[0]
    assert m["status"] == "imported" and m["step"] == str(last["step"])
    assert m["reward"] == f"{last['reward_mean']:.3f}"
    assert any("imported from verl" in i.value and "read-only" in i.value for i in app.info)
    assert not app.button and not app.get("form") and not app.slider  # no budget, allocator or lifecycle controls


def test_rollouts_page_browses_the_imported_rollouts(app, lake):
    path, _, imported = lake
    goto(app, "rollouts", no_error=True)
    with open_store(path) as store:
        n = store.count_rollouts(imported, step_min=11, step_max=11)
    assert app.text[0].value.startswith(f"{n} rollouts match")
    assert any("<b>step 11</b>" in h.proto.body for h in app.get("html"))


def test_prompt_page_tells_the_visits_from_the_rollouts(app, lake):
    path, _, imported = lake
    app.query_params["prompt"] = SPARSE
    goto(app, "prompt", no_error=True)
    assert app.selectbox(key="prompt_prompt").value == SPARSE
    assert any("logged no allocation decisions" in c.value for c in app.caption)
    visits = app.dataframe[0].value
    with open_store(path) as store:
        rows = store.rollouts(imported, prompt_id=SPARSE, limit=1000)
    expected = rows.group_by("step").agg(pl.len().alias("n"), (pl.col("reward") >= 0.5).mean().alias("p")).sort("step")
    assert sorted(visits["step"]) == expected["step"].to_list() == [0, 11]
    got = visits.sort_values("step")
    assert got["granted"].tolist() == expected["n"].to_list()
    assert got["last_pass"].tolist() == pytest.approx(expected["p"].to_list())
    steps_box = [s for s in app.selectbox if s.label == "in step"][0]
    assert [int(o) for o in steps_box.options] == [11, 0]
    assert app.text[-1].value.startswith(f"{int(expected['n'][-1])} rollouts in step 11")


def test_allocation_page_says_nothing_was_logged_and_shows_what_the_rollouts_tell(app, lake):
    path, _, imported = lake
    goto(app, "allocation", no_error=True)
    assert any("logged no allocation decisions" in i.value for i in app.info)
    with open_store(path) as store:
        last = store.rollouts(imported, step_min=11, step_max=11, limit=1000)
    groups = last.group_by("prompt_id").agg(pl.len().alias("n"), pl.col("reward").n_unique().alias("u"),
                                            (pl.col("reward") >= 0.5).sum().alias("c"))
    m = metrics(app)
    assert m["prompts"] == str(groups.height)
    assert m["rollouts"] == str(last.height)
    assert m["zero-signal groups"] == str(int((groups["u"] == 1).sum()))
    assert m["observed pass rate"] == f"{groups['c'].sum() / last.height:.3f}"
    table = app.dataframe[0].value
    assert sorted(table["prompt_id"]) == sorted(groups["prompt_id"])


def test_compare_page_puts_the_imported_run_beside_ours(app, lake):
    _, ours, imported = lake
    app.query_params.clear()
    goto(app, "compare", no_error=True)
    chosen = app.multiselect(key="compare_runs").value
    assert imported in chosen and set(ours) <= set(chosen)
    summary = app.dataframe[0].value
    assert summary["run"].nunique() == 3  # the imported run's evaluations are on the pass@k curves
    assert any("no step times logged" in c.value and "verl-import" in c.value for c in app.caption)
