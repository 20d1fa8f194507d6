"""Controls across a crash: a command applied after the last checkpoint is applied again, once, at its
step when the resumed run regenerates that step; commands a checkpoint holds are not."""

from __future__ import annotations

import pytest

from workbench.allocators import make_allocator
from workbench.engine.control import LiveSettings


def _live() -> LiveSettings:
    return LiveSettings(budget_kind="rollouts", budget=32, allocator=make_allocator("uniform", {"n": 4}),
                        temperature=1.0, eval_every=2, seed=0)


def _row(cid, command, args, step, status="applied"):
    return {"control_id": cid, "command": command, "args": args, "status": status, "applied_step": step}


def test_plan_replays_only_what_the_checkpoint_lacks():
    live = _live()
    live.note_applied([{"control_id": 1, "status": "applied"}, {"control_id": 2, "status": "rejected"}])
    state = live.state_dict()
    assert state["applied_controls"] == [1]
    fresh = _live()
    fresh.load_state_dict(state)
    rows = [
        _row(1, "set_budget", '{"kind": "rollouts", "amount": 40}', 3),  # in the checkpoint
        _row(2, "set_budget", '{"kind": "rollouts", "amount": 0}', 3, "rejected"),
        _row(3, "pause", "{}", 5),  # changes no training state
        _row(4, "set_temperature", '{"temperature": 0.5}', 6),
        _row(5, "set_budget", '{"kind": "rollouts", "amount": 24}', 5),
        _row(6, "set_eval_interval", '{"every": 3}', None, "pending"),  # applied normally
    ]
    assert fresh.plan_replay(rows, checkpoint_step=4) == [5, 4]
    assert fresh.replay_at(4) == [] and fresh.budget == 32
    assert [r["control_id"] for r in fresh.replay_at(5)] == [5]
    assert fresh.budget == 24 and fresh.temperature == 1.0
    fresh.replay_at(6)
    assert fresh.temperature == 0.5
    assert fresh.applied_controls == [1, 5, 4]  # the next checkpoint holds them
    assert fresh.replay_at(6) == []  # exactly once


def test_a_checkpoint_without_the_list_replays_what_came_after_its_step():
    live = _live()
    state = live.state_dict()
    del state["applied_controls"]  # written before the list existed
    live.load_state_dict(state)
    rows = [_row(1, "set_budget", '{"kind": "rollouts", "amount": 40}', 2),
            _row(2, "set_budget", '{"kind": "rollouts", "amount": 48}', 3)]
    assert live.plan_replay(rows, checkpoint_step=2) == [2]


def test_a_crash_after_a_command_regenerates_the_same_steps(store_dir, tiny_config):
    """Reference: stop at 2, queue budget + temperature, run to the end. Crashed: the same, but the
    run dies after step 4 (applied at 3, no checkpoint after it): resume must apply them at 3 again."""
    from workbench.control import api
    from workbench.engine import resume, run
    from workbench.engine.checkpoint import checkpoint_dir, latest_checkpoint
    from benchmarks.chaos_compare import compare_runs
    from workbench.store import open_store

    cfg = tiny_config(steps=5)
    ids = []
    for crash in (False, True):
        rid = run(cfg, store=str(store_dir), stop_after=2, name="crash" if crash else "ref")
        with open_store(store_dir) as st:
            api.set_budget(st, rid, 24)
            api.set_temperature(st, rid, 0.8)
        if crash:
            resume(str(store_dir), rid, stop_after=4)
            (checkpoint_dir(store_dir, rid) / "step-000004.pt").unlink()  # lost with the crash
            assert latest_checkpoint(checkpoint_dir(store_dir, rid)).name == "step-000002.pt"
        resume(str(store_dir), rid)
        ids.append(rid)
    ref, crashed = ids
    out = compare_runs(store_dir, crashed, ref)
    assert out["controls"] == ["set_budget applied at step 3", "set_temperature applied at step 3"]
    assert out["rows_mismatched"] == {t: 0 for t in out["rows_mismatched"]}
    assert out["final_equal"]
    with open_store(store_dir) as st:
        steps = st.run_steps(crashed)
        assert steps["budget"].to_list() == [32, 32, 24, 24, 24]
        assert steps["temperature"].to_list() == [1.0, 1.0, 0.8, 0.8, 0.8]
