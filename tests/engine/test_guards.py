"""Guards in a real run on the small organism: a fault injected the way it happens (the sampling
temperature raised to 5 by a control command), detected, rolled back to the checkpoint before it with a
changed setting, and the abandoned steps kept as an earlier attempt while the live run counts each step
once."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from workbench.engine import run
from workbench.metrics import CATALOGUE
from workbench.store import open_store

HOT = {"name": "hot", "rule": "rollout/entropy_mean > 1.5 * baseline(rollout/entropy_mean, 2)",
       "action": "rollback", "settings": {"temperature": 1.0}}


def test_temperature_fault_detected_rolled_back_and_the_attempt_kept(store_dir, tiny_config):
    cfg = tiny_config(steps=6, eval__every=0, guards=[HOT])  # checkpoints at 2, 4, 6
    seen: dict[int, list[str]] = {}
    injected: list[int] = []
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            seen.setdefault(step, sorted(metrics))
            if step == 3 and not injected:  # once: the fault is a person's command, not replayed
                injected.append(step)
                rid = st.list_runs()["run_id"][0]
                st.add_control(rid, "set_temperature", {"temperature": 5.0}, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        every_step = {m.name for m in CATALOGUE if m.present in ("step", "update") and "<" not in m.name}
        assert every_step <= set(seen[1]), sorted(every_step - set(seen[1]))

        (alert,) = st.alerts(run_id).to_dicts()  # the default guards stay quiet on a clean run
        attempt = f"{run_id}.attempt1"
        assert (alert["guard"], alert["first_step"], alert["step"], alert["status"]) == ("hot", 4, 4, "acted")
        assert alert["steps_run_id"] == attempt and "rolled back to step 2" in alert["outcome"]

        live = st.run_steps(run_id)
        assert live["step"].to_list() == [1, 2, 3, 4, 5, 6]  # each step once in the live attempt
        assert set(live["temperature"].to_list()) == {1.0}
        assert st.count_rollouts(run_id) == 6 * 32
        old = st.run_steps(attempt)
        assert old["step"].to_list() == [3, 4] and old["temperature"].to_list() == [1.0, 5.0]
        assert st.count_rollouts(attempt) == 2 * 32
        # step 3 was regenerated from the checkpoint of step 2: the same rollouts as the abandoned one
        same = ["prompt_id", "idx", "response", "reward"]
        assert (st.rollouts(run_id, step_min=3, step_max=3, limit=100).select(same).to_dicts()
                == st.rollouts(attempt, step_min=3, step_max=3, limit=100).select(same).to_dicts())
        # the fault's command went with the attempt; the guard's setting is a command of the live run
        assert st.controls(attempt)[["who", "applied_step"]].rows() == [("test", 4)]
        assert st.controls(run_id)[["who", "command", "applied_step"]].rows() == [
            ("guard:hot", "set_temperature", 3)]
        assert st.attempts(run_id)["run_id"].to_list() == [attempt]
        assert st.run(run_id)["status"] == "finished"


def test_two_rollbacks_firing_at_one_step_roll_back_once(store_dir, tiny_config):
    twin = dict(HOT, name="hot_too", settings={"lr": 5e-4})
    cfg = tiny_config(steps=5, eval__every=0, guards=[HOT, twin])  # checkpoints at 2, 4, 5
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            if step == 3 and not st.controls(st.list_runs()["run_id"][0]).height:
                st.add_control(st.list_runs()["run_id"][0], "set_temperature", {"temperature": 5.0}, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        alerts = {a["guard"]: a for a in st.alerts(run_id).to_dicts()}
        assert set(alerts) == {"hot", "hot_too"} and st.attempts(run_id).height == 1
        assert alerts["hot"]["outcome"].startswith("rolled back to step 2")
        assert alerts["hot_too"]["outcome"] == "the run was rolled back at this step by guard 'hot'"
        assert {a["steps_run_id"] for a in alerts.values()} == {f"{run_id}.attempt1"}  # both point at its steps
        assert st.controls(run_id)[["who", "command"]].rows() == [("guard:hot", "set_temperature")]
        assert st.run_steps(run_id)["step"].to_list() == [1, 2, 3, 4, 5]


def test_stop_action_goes_through_live_control(store_dir, tiny_config):
    cfg = tiny_config(steps=6, eval__every=0, eval__at_start=False,
                      guards=[{"name": "always", "rule": "rollout/count > 0", "window": 2, "action": "stop"}])
    with open_store(store_dir) as st:
        run_id = run(cfg, store=st)
        (alert,) = st.alerts(run_id).to_dicts()
        assert (alert["first_step"], alert["step"], alert["status"]) == (1, 2, "acted")
        assert st.controls(run_id)[["who", "command", "status", "applied_step"]].rows() == [
            ("guard:always", "stop", "applied", 3)]
        assert st.run(run_id)["status"] == "stopped" and st.run_steps(run_id)["step"].to_list() == [1, 2]


def test_a_guard_that_fires_again_goes_one_checkpoint_further_back_also_after_resume(store_dir, tiny_config):
    from workbench.engine import resume

    # holds from step 6 on (its baseline is unknown before 6 steps), and again on each regenerated step 6:
    # the checkpoint it went back to did not cure it, so each rollback goes one checkpoint further back
    again = {"name": "again", "rule": "rollout/count > 0 and baseline(rollout/count, 6) > 0",
             "action": "rollback"}
    cfg = tiny_config(steps=8, eval__every=0, eval__at_start=False, guards=[again])  # checkpoints every 2
    with open_store(store_dir) as st:
        run_id = run(cfg, store=st)
        alerts = [a for rid in (run_id, f"{run_id}.attempt1", f"{run_id}.attempt2") for a in st.alerts(rid).to_dicts()]
        outcomes = sorted(a["outcome"] for a in alerts)
        assert len(outcomes) == 3 and outcomes[0].startswith("no checkpoint before step 2: stopped instead")
        assert outcomes[1].startswith("rolled back to step 2") and outcomes[2].startswith("rolled back to step 4")
        steps_of = {a: st.run_steps(a)["step"].to_list() for a in st.attempts(run_id)["run_id"].to_list()}
        assert steps_of == {f"{run_id}.attempt1": [5, 6], f"{run_id}.attempt2": [3, 4, 5, 6]}
        reasons = st.attempts(run_id)["reason"].to_list()
        assert "to the checkpoint of step 4" in reasons[0] and "further back" not in reasons[0]
        assert "to the checkpoint of step 2" in reasons[1] and "one checkpoint further back" in reasons[1]
        assert st.run(run_id)["status"] == "stopped" and st.run_steps(run_id)["step"].to_list() == [1, 2, 3, 4, 5, 6]

        # a new process knows the guard's rollbacks from the store: it does not start over at step 6's checkpoint
        resume(st, run_id)
        last = st.alerts(run_id).sort("step").to_dicts()[-1]
        assert last["step"] == 7 and last["outcome"].startswith("no checkpoint before step 2: stopped instead")
        assert st.attempts(run_id).height == 2 and st.run(run_id)["status"] == "stopped"


def test_the_evaluation_before_step_1_is_the_guards_step_0(store_dir, tiny_config):
    # a rule over eval/ metrics reads the evaluation taken before the first step (eval.at_start) from step 1
    # on: reward_hacking's first arm compares the first training reward with it
    seen = {"name": "seen", "rule": "last(eval/pass1) >= 0 and baseline(eval/pass1, 1) == last(eval/pass1)"}
    cfg = tiny_config(steps=2, eval__every=0, checkpoint__every=0, guards=[seen])
    with open_store(store_dir) as st:
        run_id = run(cfg, store=st)
        (alert,) = st.alerts(run_id).to_dicts()
        ev = st.evals(run_id).filter(pl.col("step") == 0)
        at0 = float((ev["correct"] / ev["samples"]).mean())
        assert (alert["guard"], alert["step"]) == ("seen", 1)
        evidence = json.loads(alert["evidence"])  # a metric not recorded at the step: its latest value
        assert evidence["1"]["eval/pass1"] == pytest.approx(at0, rel=1e-6)


# -- the learning rate: a live command, and the non-finite loss a far too high one causes ------------

KL_TWO_EPOCHS = dict(algorithm__kl_coef=0.05, algorithm__updates_per_step=2)
"""A KL penalty to the reference and two optimiser steps per batch: after a first step at a learning rate
far too high, the second one's k3 term exp(ref - logp) overflows (a real route to an infinite loss)."""


def test_lr_command_applied_at_the_step_boundary_and_recorded(store_dir, tiny_config):
    from workbench import control
    from workbench.errors import ControlError

    cfg = tiny_config(steps=3, eval__every=0, eval__at_start=False, checkpoint__every=0)
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            if step == 1:
                rid = st.list_runs()["run_id"][0]
                with pytest.raises(ControlError, match=r"set_lr: lr: must be in \(0, 1000\], got 0"):
                    control.set_lr(st, rid, 0.0)
                assert len(st.controls(rid)) == 0  # refused: nothing stored
                control.set_lr(st, rid, 2e-4, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        assert st.controls(run_id)[["who", "command", "status", "applied_step"]].rows() == [
            ("test", "set_lr", "applied", 2)]
        assert st.run_steps(run_id)["lr"].to_list() == pytest.approx([1e-3, 2e-4, 2e-4])


def test_lr_and_optimizer_steps_are_recorded_on_steps_that_skip_the_update(store_dir, tiny_config):
    """One rollout a prompt: no group carries signal, so no step updates, whatever the sampler draws;
    the learning rate in force (a command's included) is still on every step."""
    cfg = tiny_config(steps=3, eval__every=0, eval__at_start=False, checkpoint__every=0,
                      allocator__budget=8, allocator__params={"n": 1})
    seen = {}
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            seen[step] = metrics
            if step == 1:
                st.add_control(st.list_runs()["run_id"][0], "set_lr", {"lr": 2e-4}, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        steps = st.run_steps(run_id)
    assert steps["zero_signal_frac"].to_list() == [1.0, 1.0, 1.0]
    assert steps["lr"].to_list() == pytest.approx([1e-3, 2e-4, 2e-4])
    assert steps["loss"].null_count() == 3  # nothing was optimised
    assert [seen[k]["train/optimizer_steps"] for k in (1, 2, 3)] == [0.0, 0.0, 0.0]
    assert not any("train/loss" in seen[k] for k in (1, 2, 3))


def test_nan_guard_rolls_back_a_real_nonfinite_loss_with_a_lower_lr(store_dir, tiny_config):
    cfg = tiny_config(steps=5, eval__every=3, eval__at_start=False, **KL_TWO_EPOCHS,
                      guards=[{"preset": "nan", "settings": {"lr": 5e-4}}])  # checkpoints at 2, 4, 5
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            if step == 2:  # once: a person's command, applied at step 3 (not replayed after the rollback)
                st.add_control(st.list_runs()["run_id"][0], "set_lr", {"lr": 10.0}, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        (alert,) = st.alerts(run_id).to_dicts()
        assert (alert["guard"], alert["first_step"], alert["step"], alert["status"]) == ("nan", 3, 3, "acted")
        assert "rolled back to step 2, then lr = 0.0005" in alert["outcome"]
        old = st.run_steps(f"{run_id}.attempt1").to_dicts()
        assert [r["step"] for r in old] == [3] and not math.isfinite(old[0]["loss"])
        live = st.run_steps(run_id)
        assert live["step"].to_list() == [1, 2, 3, 4, 5] and all(math.isfinite(x) for x in live["loss"])
        assert live["lr"].to_list() == pytest.approx([1e-3, 1e-3, 5e-4, 5e-4, 5e-4])
        assert st.run(run_id)["status"] == "finished"
        # the step 3 evaluation was not sampled from the non-finite weights: the live run's is the only one
        assert sorted(set(st.evals(run_id)["step"].to_list())) == [3, 5]


def test_nan_guard_stop_writes_no_checkpoint_of_nonfinite_weights(store_dir, tiny_config):
    from workbench.engine.checkpoint import checkpoint_dir, list_checkpoints

    cfg = tiny_config(steps=5, eval__every=0, eval__at_start=False, checkpoint__every=1, **KL_TWO_EPOCHS,
                      guards=[{"preset": "nan", "action": "stop"}])
    with open_store(store_dir) as st:
        def on_step(step, metrics):
            if step == 1:
                st.add_control(st.list_runs()["run_id"][0], "set_lr", {"lr": 10.0}, who="test")

        run_id = run(cfg, store=st, on_step=on_step)
        (alert,) = st.alerts(run_id).to_dicts()
        assert (alert["first_step"], alert["status"]) == (2, "acted") and "stop queued" in alert["outcome"]
        assert st.run(run_id)["status"] == "stopped" and st.run_steps(run_id)["step"].to_list() == [1, 2]
        assert [p.name for p in list_checkpoints(checkpoint_dir(store_dir, run_id))] == ["step-000001.pt"]
        assert any("no checkpoint at step 2" in m for m in st.events(run_id)["message"].to_list())
