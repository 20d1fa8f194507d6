"""Every page of the dashboard through Streamlit's AppTest on a store filled through the store's
writer API (two runs, budget and allocator changes, evaluations, one hostile response): no
exceptions, the numbers shown are the store's, hostile filter values are shown as text and change
nothing, and the control panel writes the commands it says it writes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")
import synth  # noqa: E402
from apptest import goto, open_app, point_at  # noqa: E402
from workbench.store import open_store  # noqa: E402

HOSTILE = ["'; DROP TABLE rollouts; --", "<script>alert(1)</script>"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    path = tmp_path_factory.mktemp("dash") / "store"
    ids = synth.fill(path, steps=4)
    return path, ids


def metrics(at):
    return {m.label: m.value for m in at.metric}


def htmls(at):
    return [h.proto.body for h in at.get("html")]


def test_runs_page_lists_every_run_with_its_numbers(app, lake):
    path, ids = lake
    df = app.dataframe[0].value
    assert sorted(df["run_id"]) == sorted(ids)
    with open_store(path) as store:
        steps = store.run_steps(ids)
    for rid in ids:
        row = df[df["run_id"] == rid].iloc[0]
        mine = steps.filter(steps["run_id"] == rid)
        assert row["steps"] == mine.height
        assert row["tokens"] == mine["tokens_generated"].sum()
        assert 0.0 < row["best_pass1"] <= 1.0
    # the finished run has its lifecycle buttons disabled; the running one can be paused
    app.selectbox(key="runs_run").set_value(ids[1]).run()
    assert app.button(key="runs_pause").disabled
    app.selectbox(key="runs_run").set_value(ids[0]).run()
    assert not app.button(key="runs_pause").disabled


def test_live_page_shows_the_last_step_and_regime(app, lake):
    path, ids = lake
    at = goto(app, "live")
    run_id = at.selectbox(key="live_run").value
    with open_store(path) as store:
        last = store.run_steps(run_id).sort("step").tail(1).to_dicts()[0]
    m = metrics(at)
    assert m["step"] == str(last["step"])
    assert m["reward"] == f"{last['reward_mean']:.3f}"
    assert m["allocator"] == last["allocator"]
    assert m["budget (rollouts)"] == str(last["budget"])
    assert float(m["held-out pass@1"]) > 0
    assert at.selectbox(key="live_allocator").value in at.selectbox(key="live_allocator").options


def test_rollouts_page_groups_and_escapes(app, lake):
    path, ids = lake
    at = goto(app, "rollouts")
    at.selectbox(key="rollouts_run").set_value(ids[0]).run()
    with open_store(path) as store:
        last = int(store.run_steps(ids[0])["step"].max())
        n = store.count_rollouts(ids[0], step_min=last, step_max=last)
        first = store.rollouts(ids[0], step_min=last, step_max=last, limit=1)
    assert at.text[0].value.startswith(f"{n} rollouts match")
    body = "".join(htmls(at))
    assert f"<b>step {last}</b>" in body and first["prompt_id"][0] in body
    # the synthetic hostile response is shown as text, never as markup
    assert "&lt;script&gt;" in body or "&lt;</span>" in body
    assert "<script>" not in body


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_filters_are_text_and_change_nothing(app, lake, value):
    path, ids = lake
    with open_store(path) as store:
        before = store.count_rollouts(ids[0])
    at = goto(app, "rollouts")
    at.selectbox(key="rollouts_run").set_value(ids[0]).run()
    at.text_input(key="rollouts_prompt").set_value(value).run()
    assert not at.exception
    assert at.text[0].value == f"0 rollouts match · page 1 of 1 · prompt filter: {value}"
    assert any("No rollouts match" in i.value for i in at.info)
    at.text_input(key="rollouts_prompt").set_value("").run()
    at.selectbox(key="rollouts_verdict").set_value("other…").run()
    at.text_input(key="rollouts_verdict_other").set_value(value).run()
    assert not at.exception
    assert at.text[0].value.endswith(f"verdict filter: {value}")
    assert at.text[0].value.startswith("0 rollouts match")
    with open_store(path) as store:
        assert store.count_rollouts(ids[0]) == before


def test_prompt_page_tells_one_prompts_story(app, lake):
    path, ids = lake
    at = goto(app, "prompt")
    run_id = at.selectbox(key="prompt_run").value
    prompt_id = at.selectbox(key="prompt_prompt").value
    with open_store(path) as store:
        allocs = store.allocations(run_id, prompt_id=prompt_id)
        text = store.prompts(run_id).filter(pl_col("prompt_id") == prompt_id)["text"][0]
        n = store.count_rollouts(run_id, prompt_id=prompt_id)
    assert at.code[0].value == text
    grants = at.dataframe[0].value
    assert int(grants["granted"].sum()) == int(allocs["granted"].sum())
    joined = " | ".join(grants["reasons"])
    assert all(r in joined for r in allocs["reason"].to_list())
    last_visit = int(allocs["step"].max())
    with open_store(path) as store:
        in_last = store.count_rollouts(run_id, prompt_id=prompt_id, step_min=last_visit, step_max=last_visit)
    assert at.selectbox(key=next(s.key for s in at.selectbox if s.key.startswith("prompt_step_"))).value == last_visit
    assert any(t.value.startswith(f"{in_last} rollouts in step {last_visit}") for t in at.text)
    assert in_last <= n
    # a hostile prompt id is shown as text and finds nothing
    at.selectbox(key="prompt_prompt").set_value(prompt_id)  # the box accepts typed ids in the browser
    assert not at.exception


def pl_col(name):
    import polars as pl

    return pl.col(name)


def test_allocation_page_counts_the_step(app, lake):
    path, ids = lake
    at = goto(app, "allocation")
    run_id = at.selectbox(key="allocation_run").value
    step = at.slider(key="allocation_step").value
    with open_store(path) as store:
        allocs = store.allocations(run_id, step=step)
    m = metrics(at)
    assert m["rollouts granted"] == str(int(allocs["granted"].sum()))
    assert m["prompts"] == str(allocs["prompt_id"].n_unique())
    table = at.dataframe[0].value
    assert sorted(table["prompt_id"]) == sorted(allocs["prompt_id"].to_list())


def test_compare_page_summarises_each_run(app, lake):
    path, ids = lake
    at = goto(app, "compare")
    assert sorted(at.multiselect(key="compare_runs").value) == sorted(ids)
    summary = at.dataframe[0].value
    assert summary["run"].nunique() == len(ids)
    assert set(summary["k"]) == {1, at.selectbox(key="compare_k").value}
    assert ((summary["best"] >= summary["final"]) & (summary["best"] <= 1.0)).all()


def test_control_panel_writes_the_commands(app, lake):
    path, ids = lake
    at = goto(app, "live")
    at.selectbox(key="live_run").set_value(ids[0]).run()  # the run still marked running
    at.slider(key="live_budget").set_value(24)
    next(b for b in at.button if b.label == "Set budget").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.number_input(key="live_lr").set_value(3e-5)
    next(b for b in at.button if b.label == "Set learning rate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    other = next(a for a in at.selectbox(key="live_allocator").options if a != at.selectbox(key="live_allocator").value)
    at.selectbox(key="live_allocator").set_value(other).run()
    next(b for b in at.button if b.label == f"Switch to {other}").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    at.button(key="live_pause").click().run()
    with open_store(path) as store:
        ctl = store.controls(ids[0]).to_dicts()
    got = [(c["command"], json.loads(c["args"]) if isinstance(c["args"], str) else c["args"]) for c in ctl]
    assert ("set_budget", {"kind": "rollouts", "amount": 24}) in got
    assert ("set_lr", {"lr": 3e-5}) in got
    assert any(cmd == "set_allocator" and args["name"] == other for cmd, args in got)
    assert ("pause", {}) in got
    assert all(c["who"] == "dashboard" and c["status"] == "pending" for c in ctl)
    shown = at.dataframe[0].value
    assert set(shown["command"]) >= {"set_budget", "set_allocator", "pause"}


def test_allocator_form_rejects_a_bad_value_before_sending(app, lake):
    path, ids = lake
    at = goto(app, "live")
    at.selectbox(key="live_run").set_value(ids[0]).run()
    at.selectbox(key="live_allocator").set_value("multistage").run()
    with open_store(path) as store:
        before = store.controls(ids[0]).height
    at.number_input(key="live_param_multistage_n").set_value(0)
    label = next(b.label for b in at.button if b.label.startswith(("Switch to", "Set parameters")))
    next(b for b in at.button if b.label == label).click().run()
    assert any("multistage.n" in e.value for e in at.error)
    with open_store(path) as store:
        assert store.controls(ids[0]).height == before


def test_launch_form_validates_overrides_before_anything_starts(app, lake):
    path, ids = lake
    assert app.selectbox(key="runs_config").options[0] == "organism.toml"  # the default experiment first
    app.text_area(key="runs_overrides").set_value("optim.lr=-1\nsteps=3")
    next(b for b in app.button if b.label == "Validate and launch").click().run()
    assert any("optim.lr" in e.value for e in app.error), [e.value for e in app.error]
    with open_store(path) as store:
        assert sorted(store.list_runs()["run_id"].to_list()) == sorted(ids)  # nothing was created
    app.text_area(key="runs_overrides").set_value("steps=3")
    next(b for b in app.button if b.label == "Validate").click().run()
    assert any(s.value == "valid" for s in app.success)
    assert app.json[0].value and json.loads(app.json[0].value)["steps"] == 3
    assert not app.warning  # nothing a valid uniform run cannot promise
    app.text_area(key="runs_overrides").set_value('rollout.shape="speculative"\nallocator.name="selective"')
    next(b for b in app.button if b.label == "Validate").click().run()
    assert any(s.value == "valid" for s in app.success), [e.value for e in app.error]
    assert any("allocator 'selective': the allocator reads a prompt's earlier rewards" in w.value for w in app.warning)


def test_entropy_band_of_runs_logged_before_the_engine_wrote_quantiles(tmp_path, monkeypatch):
    """A run whose steps carry the engine's token-entropy quantiles is drawn from them; an older run's
    band is computed from its rollouts, and the caption says which."""
    from app import data

    new = synth.fill(tmp_path / "new", runs=("uniform",), steps=3)[0]
    old = synth.fill(tmp_path / "old", runs=("uniform",), steps=3, entropy_quantiles=False)[0]
    for path, run_id, source in ((tmp_path / "new", new, "token entropy quantiles logged by the engine"),
                                 (tmp_path / "old", old, "quantiles of rollout mean entropy, steps 0")):
        point_at(path, monkeypatch)
        frame, said = data.entropy_quantiles(run_id)
        assert said.startswith(source), said
        assert set(frame["step"].to_list()) == {0, 1, 2} and frame["value"].null_count() == 0


def test_store_location_is_shown_relative_to_where_the_dashboard_started(tmp_path, monkeypatch):
    from app import data

    monkeypatch.chdir(tmp_path)
    assert data.shown_location(str(tmp_path / "store")) == "store"
    assert data.shown_location("store") == "store"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path / "home")
    assert data.shown_location(str(tmp_path / "elsewhere" / "s")) == str(tmp_path / "elsewhere" / "s")
    monkeypatch.chdir("/")
    assert data.shown_location(str(tmp_path / "home" / "runs" / "s")) == "~/runs/s"
    assert data.shown_location("postgres:dbname=lake") == "postgres:dbname=lake"


def test_alerts_page_metric_picker_reads_the_catalogue(app, lake):
    """The guard form's metric picker: the run's recorded numbers in the catalogue's order, each with
    its meaning from `workbench/metrics.py`, and the run's values drawn."""
    from workbench.metrics import lookup

    at = goto(app, "alerts")
    (picker,) = [s for s in at.selectbox if s.label == "metric a rule may read"]
    assert picker.options[0] == "rollout/count" and "rollout/reward_mean" in picker.options
    picker.set_value("rollout/reward_mean").run()
    assert not at.exception, at.exception
    assert any(c.value.startswith(lookup("rollout/reward_mean").meaning) for c in at.caption)


def test_alerts_page_draws_the_newest_alerts_and_more_on_request(tmp_path, monkeypatch):
    """A guard that fired 25 times: the page draws the newest 20 (newest first) and all 25 when asked."""
    path = tmp_path / "store"
    run_id = synth.fill(path, runs=("uniform",), steps=2)[0]
    with open_store(path) as store:
        for i in range(25):
            store.add_alert(run_id, dict(guard="zero_signal", rule="rollout/zero_signal_frac > 0.95", window_steps=1,
                                         action="alert", first_step=1, step=1, evidence={"1": {"i": i}},
                                         message=f"guard 'zero_signal' fired, number {i}"))
    at = goto(open_app(path, monkeypatch), "alerts")
    fired = [t.value for t in at.text if t.value.startswith("guard 'zero_signal'")]
    assert len(fired) == 20 and fired[0] == "guard 'zero_signal' fired, number 24"
    (shown,) = [n for n in at.number_input if n.label.startswith("alerts shown")]
    assert "of 25" in shown.label
    shown.set_value(25).run()
    assert not at.exception, at.exception
    assert len([t for t in at.text if t.value.startswith("guard 'zero_signal'")]) == 25


def test_runs_and_live_pages_say_when_a_run_cannot_reach_its_store(lake, monkeypatch):
    """A run in an outage of its store says so in a file in the store's folder; both pages show it."""
    import datetime as dt

    from workbench.store.outage import clear_status, write_status

    path, ids = lake
    since = dt.datetime(2026, 12, 4, 22, 41, 3, tzinfo=dt.timezone.utc)
    write_status(path, ids[0], state="retrying", since=since, queued_steps=7, bound=256, error="down")
    try:
        at = open_app(path, monkeypatch)
        said = [w.value for w in at.warning]
        assert f"{ids[0]}: store unreachable, retrying since 2026-12-04 22:41:03 UTC (7 steps queued, bound 256)" in said
        at.query_params["run"] = ids[0]
        goto(at, "live")
        assert any("store unreachable, retrying since" in w.value for w in at.warning)
    finally:
        clear_status(path, ids[0])
