"""apply_pending against a real store and a recording engine double: outcomes, order, boundaries, pause."""

import threading

import pytest

from waiting import wait_until
from workbench.control.apply import apply_pending
from workbench.control.protocol import Controllable


def _controls(store, run_id):
    return {r["control_id"]: r for r in store.controls(run_id).to_dicts()}


def test_recording_engine_is_controllable(engine):
    assert isinstance(engine, Controllable)


def test_applies_in_order_and_records_outcomes(store, run_id, engine):
    a = store.add_control(run_id, "set_budget", {"kind": "rollouts", "amount": 256})
    b = store.add_control(run_id, "set_allocator", {"name": "multistage", "params": {"n": 4}})
    c = store.add_control(run_id, "set_eval_interval", {"every": 5})
    d = store.add_control(run_id, "checkpoint", {})
    out = apply_pending(store, run_id, engine, step=7)
    assert [o["control_id"] for o in out] == [a, b, c, d]
    assert all(o["status"] == "applied" and o["step"] == 7 for o in out)
    assert engine.calls == [
        ("set_budget", ("rollouts", 256)),
        ("set_allocator", ("multistage", {"n": 4})),
        ("set_eval_interval", (5,)),
        ("request_checkpoint", ()),
    ]
    rows = _controls(store, run_id)
    assert {r["status"] for r in rows.values()} == {"applied"}
    assert {r["applied_step"] for r in rows.values()} == {7}
    assert store.pending_controls(run_id) == []
    events = store.events(run_id)
    assert (events["kind"] == "control").sum() == 4
    # nothing left: a second call applies nothing
    assert apply_pending(store, run_id, engine, step=8) == []


def test_bad_commands_rejected_with_reasons_and_run_unharmed(store, run_id, engine):
    bad = {
        store.add_control(run_id, "set_budget", {"amount": -3}): "set_budget: amount",
        store.add_control(run_id, "set_temperature", {"temperature": "hot"}): "set_temperature: temperature",
        store.add_control(run_id, "set_allocator", {"name": "nope"}): "unknown allocator 'nope'",
        store.add_control(run_id, "set_allocator", {"name": "uniform", "params": {"zz": 1}}): "unknown parameter",
        store.add_control(run_id, "explode", {}): "unknown command 'explode'",
        store.add_control(run_id, "resume", {}): "not paused",
        store.add_control(run_id, "set_allocator_params", {"params": {"n": 100}}): "engine's limit 64",
    }
    good = store.add_control(run_id, "set_temperature", {"temperature": 0.7})
    out = apply_pending(store, run_id, engine, step=3)
    assert len(out) == 8
    rows = _controls(store, run_id)
    for cid, text in bad.items():
        assert rows[cid]["status"] == "rejected"
        assert text in rows[cid]["reason"], rows[cid]["reason"]
    assert rows[good]["status"] == "applied" and rows[good]["applied_step"] == 3
    assert engine.calls == [("set_temperature", (0.7,))]
    warnings = store.events(run_id).filter(level="warning")
    assert len(warnings) == len(bad)


def test_engine_bug_is_a_rejection_not_a_crash(store, run_id, engine):
    def broken(every):
        raise RuntimeError("boom")

    engine.set_eval_interval = broken
    cid = store.add_control(run_id, "set_eval_interval", {"every": 3})
    out = apply_pending(store, run_id, engine, step=1)
    assert out[0]["status"] == "rejected"
    assert "engine error: RuntimeError: boom" in _controls(store, run_id)[cid]["reason"]


def test_stage_boundary_applies_only_in_step_settings(store, run_id, engine):
    budget = store.add_control(run_id, "set_budget", {"amount": 64})
    temp = store.add_control(run_id, "set_temperature", {"temperature": 1.2})
    pause = store.add_control(run_id, "pause", {})
    out = apply_pending(store, run_id, engine, step=4, boundary="stage")
    assert [o["control_id"] for o in out] == [temp]
    assert [r["control_id"] for r in store.pending_controls(run_id)] == [budget, pause]
    store.add_control(run_id, "resume", {})
    out = apply_pending(store, run_id, engine, step=5, boundary="step")
    assert [o["command"] for o in out] == ["set_budget", "pause", "resume"]
    assert all(o["status"] == "applied" for o in out)


def test_stop_returns_and_leaves_later_commands_pending(store, run_id, engine):
    store.add_control(run_id, "stop", {})
    later = store.add_control(run_id, "set_budget", {"amount": 32})
    out = apply_pending(store, run_id, engine, step=9)
    assert [o["command"] for o in out] == ["stop"]
    assert engine.calls == [("request_stop", ())]
    assert store.run(run_id)["status"] == "stopping"
    assert [r["control_id"] for r in store.pending_controls(run_id)] == [later]


def test_pause_blocks_until_resume_applying_commands_meanwhile(store, run_id, engine):
    store.add_control(run_id, "pause", {})
    done = threading.Event()
    result = {}

    def run():
        result["out"] = apply_pending(store, run_id, engine, step=12, poll_s=0.05)
        done.set()

    t = threading.Thread(target=run)
    t.start()
    wait_until(lambda: store.run(run_id)["status"] == "paused", 20, "the run to pause", every=0.05)
    assert not done.wait(0.5), "apply_pending returned while paused"
    store.add_control(run_id, "set_budget", {"amount": 48})
    store.add_control(run_id, "pause", {})  # already paused: rejected
    wait_until(lambda: not len(store.pending_controls(run_id)), 20, "both commands handled", every=0.05)
    assert not done.is_set()
    assert engine.calls == [("set_budget", ("rollouts", 48))]
    store.add_control(run_id, "resume", {})
    assert done.wait(20), "resume did not end the pause"
    t.join()
    assert [(o["command"], o["status"]) for o in result["out"]] == [
        ("pause", "applied"), ("set_budget", "applied"), ("pause", "rejected"), ("resume", "applied")]
    assert all(o["step"] == 12 for o in result["out"])
    assert store.run(run_id)["status"] == "running"


def test_pause_then_stop(store, run_id, engine):
    store.add_control(run_id, "pause", {})
    store.add_control(run_id, "stop", {})
    out = apply_pending(store, run_id, engine, step=2, poll_s=0.01)
    assert [o["command"] for o in out] == ["pause", "stop"]
    assert engine.calls == [("request_stop", ())]


def test_unknown_boundary_is_refused(store, run_id, engine):
    from workbench.errors import ControlError

    with pytest.raises(ControlError, match="boundary"):
        apply_pending(store, run_id, engine, step=0, boundary="epoch")
