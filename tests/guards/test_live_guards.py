"""Guards changed live: `workbench ctl RUN guard add|set|remove|list` queue `guard` commands (checked
first: unknown metric, bad syntax, window < 1 give one line and store nothing), the engine's settings
apply them, and `guard list` replays what was applied; `workbench alerts` lists and acknowledges."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.control.apply import apply_pending
from workbench.engine.control import LiveSettings
from workbench.allocators import make_allocator
from workbench.errors import ControlError
from workbench.guards.presets import DEFAULT
from workbench.store import open_store

runner = CliRunner()


@pytest.fixture
def live_run(tmp_path):
    path = tmp_path / "store"
    with open_store(path) as st:
        run_id = st.create_run("live", {"steps": 10}, seed=0, status="running")
    return str(path), run_id


def _ctl(path, run_id, *argv):
    return runner.invoke(app, ["ctl", run_id, "guard", *argv, "--store", path])


@pytest.mark.parametrize("argv, says", [
    (["add", "g", "--rule", "train/los > 1"], "unknown metric 'train/los' (did you mean train/loss"),
    (["add", "g", "--rule", "train/loss >"], "found the end of the rule"),
    (["add", "g", "--rule", "train/loss > 1", "--window", "0"], "window: 0 is not allowed"),
    (["add", "g", "--rule", "train/loss > 1", "--action", "explode"], "guards.action: 'explode'"),
    (["add", "nan", "--rule", "train/loss > 1"], "'nan' exists already"),
    (["remove", "nope"], "no guard 'nope' in force"),
    (["set", "nan", "--window", "-2"], "window: -2 is not allowed"),
])
def test_bad_guard_commands_are_one_line_and_store_nothing(live_run, argv, says):
    path, run_id = live_run
    result = _ctl(path, run_id, *argv)
    assert result.exit_code != 0 and isinstance(result.exception, ControlError)
    msg = str(result.exception)
    assert says in msg and "\n" not in msg, msg
    with open_store(path) as st:
        assert st.controls(run_id).height == 0


def test_guard_commands_apply_and_list(live_run):
    path, run_id = live_run
    for argv in (["add", "spike", "--rule", "train/loss > 5 * mean(train/loss, 10)", "--window", "2",
                  "--action", "rollback", "--setting", "temperature=0.7"],
                 ["set", "entropy_collapse", "--action", "pause"],
                 ["remove", "zero_signal"]):
        result = _ctl(path, run_id, *argv)
        assert result.exit_code == 0, (argv, result.output, result.exception)
    live = LiveSettings(budget_kind="rollouts", budget=8, allocator=make_allocator("uniform", {}, seed=0),
                        temperature=1.0, eval_every=0, seed=0)
    with open_store(path) as st:
        outcomes = apply_pending(st, run_id, live, step=3)
    assert [o["status"] for o in outcomes] == ["applied"] * 3
    assert live.guards["spike"].settings == {"temperature": 0.7} and live.guards["spike"].window == 2
    assert live.guards["entropy_collapse"].action == "pause" and "zero_signal" not in live.guards
    listed = json.loads(_ctl(path, run_id, "list", "--json").output)
    assert {g["name"] for g in listed} == set(live.guards) == (set(DEFAULT) - {"zero_signal"}) | {"spike"}
    # the checkpoint carries the live guard set
    again = LiveSettings(budget_kind="rollouts", budget=8, allocator=make_allocator("uniform", {}, seed=0),
                         temperature=1.0, eval_every=0, seed=0)
    again.load_state_dict(live.state_dict())
    assert again.guards == live.guards


def test_alerts_list_and_ack(live_run):
    path, run_id = live_run
    with open_store(path) as st:
        aid = st.add_alert(run_id, dict(guard="nan", rule="train/loss is not finite", window_steps=1,
                                        action="alert", first_step=2, step=2, evidence={"2": {"train/loss": "nan"}},
                                        message="guard 'nan' fired at step 2"))
    out = runner.invoke(app, ["alerts", "list", run_id, "--store", path, "--json"])
    assert json.loads(out.output)[0]["status"] == "open"
    assert runner.invoke(app, ["alerts", "ack", aid, "--store", path]).exit_code == 0
    with open_store(path) as st:
        assert st.alerts(run_id)["status"].to_list() == ["acknowledged"]


def test_alerts_page_through_apptest(live_run, monkeypatch):
    """The Alerts page on a store with an alert: no exception, the alert's line shown."""
    pytest.importorskip("streamlit")
    from apptest import goto, open_app

    path, run_id = live_run
    with open_store(path) as s:
        s.add_alert(run_id, dict(guard="zero_signal", rule="rollout/zero_signal_frac > 0.9", window_steps=5,
                                 action="alert", first_step=3, step=7, evidence={}, message="guard 'zero_signal' fired",
                                 hint="a multi-stage allocator"))
    at = goto(open_app(path, monkeypatch), "alerts")
    assert any("guard 'zero_signal' fired" in t.value for t in at.text)
    assert any("a multi-stage allocator" in c.value for c in at.caption)
