"""`workbench ctl`, `workbench runs`: thin commands over the API, JSON for scripts, one-line errors."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from workbench.cli import app
from workbench.control.apply import apply_pending
from workbench.errors import ControlError

runner = CliRunner()


def _store_dir(store):
    return str(store.location.root)


def test_ctl_commands_queue_rows(store, run_id):
    s = _store_dir(store)
    cases = [
        (["budget", "64"], "set_budget", {"kind": "rollouts", "amount": 64}),
        (["budget", "5000", "--kind", "tokens"], "set_budget", {"kind": "tokens", "amount": 5000}),
        (["allocator", "multistage", "-p", "n=4", "-p", "n_max=16"], "set_allocator",
         {"name": "multistage", "params": {"n": 4, "n_max": 16}}),
        (["params", "n_max=20"], "set_allocator_params", {"params": {"n_max": 20}}),
        (["temperature", "0.7"], "set_temperature", {"temperature": 0.7}),
        (["lr", "5e-5"], "set_lr", {"lr": 5e-5}),
        (["eval-interval", "0"], "set_eval_interval", {"every": 0}),
        (["checkpoint"], "checkpoint", {}),
        (["pause"], "pause", {}),
        (["resume"], "resume", {}),
        (["stop"], "stop", {}),
    ]
    for argv, command, args in cases:
        result = runner.invoke(app, ["ctl", run_id, *argv, "--store", s, "--json"])
        assert result.exit_code == 0, (argv, result.output, result.exception)
        row = json.loads(result.output)
        assert row["command"] == command and row["status"] == "pending" and row["who"] == "cli"
        assert json.loads(row["args"]) == args
    assert [r["command"] for r in store.pending_controls(run_id)] == [c[1] for c in cases]


def test_ctl_invalid_value_is_a_domain_error(store, run_id):
    result = runner.invoke(app, ["ctl", run_id, "temperature", "0", "--store", _store_dir(store)])
    assert isinstance(result.exception, ControlError)
    assert "set_temperature: temperature" in str(result.exception)
    assert store.pending_controls(run_id) == []
    result = runner.invoke(app, ["ctl", run_id, "lr", "--store", _store_dir(store), "--", "-1e-4"])
    assert isinstance(result.exception, ControlError)
    assert str(result.exception) == f"run {run_id}: set_lr: lr: must be in (0, 1000], got -0.0001"
    assert store.pending_controls(run_id) == []


def test_ctl_wait_reports_the_outcome_and_history(store, run_id, engine):
    cid = store.add_control(run_id, "set_budget", {"kind": "rollouts", "amount": 0})
    apply_pending(store, run_id, engine, step=4)
    result = runner.invoke(app, ["ctl", run_id, "history", "--store", _store_dir(store), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows[-1]["control_id"] == cid and rows[-1]["status"] == "rejected"
    text = runner.invoke(app, ["ctl", run_id, "history", "--store", _store_dir(store)]).output
    assert "rejected" in text and "set_budget: amount" in text


def test_runs_lists_status(store, run_id):
    result = runner.invoke(app, ["runs", "--store", _store_dir(store), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["run_id"]: r for r in json.loads(result.output)}
    assert rows[run_id]["status"] == "running"
    assert rows[run_id]["heartbeat_age_s"] is not None


def test_one_line_error_and_exit_code_1(store, run_id):
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "ctl", run_id, "budget", "0", "--store", _store_dir(store)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"error: run {run_id}: set_budget: amount: must be in [1, 1000000], got 0"]
