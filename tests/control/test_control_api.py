"""The Python API: validated before insert, the run's status respected, outcomes read back."""

import pytest

from workbench import control
from workbench.control.apply import apply_pending
from workbench.errors import ControlError


def test_commands_insert_validated_rows(store, run_id):
    ids = [
        control.pause(store, run_id),
        control.resume(store, run_id),
        control.checkpoint(store, run_id),
        control.set_budget(store, run_id, 384),
        control.set_budget(store, run_id, 9000, kind="tokens"),
        control.set_allocator(store, run_id, "multistage", {"n": 4}),
        control.set_allocator_params(store, run_id, {"n_max": 24}),
        control.set_temperature(store, run_id, 0.8),
        control.set_eval_interval(store, run_id, 0),
        control.stop(store, run_id),
    ]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    rows = store.pending_controls(run_id)
    assert [r["command"] for r in rows] == [
        "pause", "resume", "checkpoint", "set_budget", "set_budget", "set_allocator",
        "set_allocator_params", "set_temperature", "set_eval_interval", "stop"]
    assert rows[3]["args"] == {"kind": "rollouts", "amount": 384}
    assert rows[5]["args"] == {"name": "multistage", "params": {"n": 4}}
    assert rows[7]["args"] == {"temperature": 0.8}
    assert {r["who"] for r in rows} == {"api"}


def test_invalid_values_refused_before_insert(store, run_id):
    cases = [
        (lambda: control.set_budget(store, run_id, 0), "set_budget: amount"),
        (lambda: control.set_budget(store, run_id, 10, kind="gpus"), "set_budget: kind"),
        (lambda: control.set_temperature(store, run_id, -1.0), "set_temperature: temperature"),
        (lambda: control.set_eval_interval(store, run_id, -2), "set_eval_interval: every"),
        (lambda: control.set_allocator(store, run_id, "nope"), "unknown allocator"),
        (lambda: control.set_allocator(store, run_id, "uniform", {"k": 1}), "unknown parameter"),
        # validated against the allocator in force (the run's config says uniform)
        (lambda: control.set_allocator_params(store, run_id, {"n_max": 3}), "unknown parameter"),
        (lambda: control.issue(store, run_id, "explode"), "unknown command"),
    ]
    for call, text in cases:
        with pytest.raises(ControlError, match=text) as info:
            call()
        assert run_id in str(info.value)
    assert store.pending_controls(run_id) == []


def test_allocator_in_force_follows_pending_switches(store, run_id):
    assert control.allocator_in_force(store, run_id) == ("uniform", {"n": 8})
    control.set_allocator(store, run_id, "multistage", {"n": 4})
    # params of the new allocator are now valid, the old one's field set is not the reference
    control.set_allocator_params(store, run_id, {"n_max": 24})
    assert control.allocator_in_force(store, run_id) == ("multistage", {"n": 4, "n_max": 24})


def test_unknown_and_ended_runs(store, run_id):
    with pytest.raises(ControlError, match="run 'no-such-run': no such run"):
        control.pause(store, "no-such-run")
    store.set_run_status(run_id, "finished")
    with pytest.raises(ControlError, match="the run is finished"):
        control.set_budget(store, run_id, 10)
    store.set_run_status(run_id, "stopped")
    with pytest.raises(ControlError, match="workbench resume"):
        control.resume(store, run_id)
    # a setting queued on a stopped run applies when it is restarted
    assert control.set_budget(store, run_id, 10) > 0


def test_outcome_and_wait(store, run_id, engine):
    cid = control.set_budget(store, run_id, 64)
    assert control.outcome(store, run_id, cid)["status"] == "pending"
    assert control.wait(store, run_id, cid, timeout_s=0.1)["status"] == "pending"
    apply_pending(store, run_id, engine, step=5)
    row = control.wait(store, run_id, cid, timeout_s=5)
    assert row["status"] == "applied" and row["applied_step"] == 5
    with pytest.raises(ControlError, match="no control 999999"):
        control.outcome(store, run_id, 999999)
