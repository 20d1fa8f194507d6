"""Guards in a real run on the small organism: a fault injected the way it happens (the sampling
temperature raised to 5 by a control command), detected, rolled back to the checkpoint before it with a
changed setting, and the abandoned steps kept as an earlier attempt while the live run counts each step
once."""

from __future__ import annotations

from workbench.engine import run
from workbench.guards.metrics import ENGINE_METRICS
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

        run_id = run(cfg, store=st, on_step=on_step, store_dir=store_dir)
        assert ENGINE_METRICS <= set(seen[1]), sorted(ENGINE_METRICS - set(seen[1]))

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


def test_stop_action_goes_through_live_control(store_dir, tiny_config):
    cfg = tiny_config(steps=6, eval__every=0, eval__at_start=False,
                      guards=[{"name": "always", "rule": "rollout/count > 0", "window": 2, "action": "stop"}])
    with open_store(store_dir) as st:
        run_id = run(cfg, store=st, store_dir=store_dir)
        (alert,) = st.alerts(run_id).to_dicts()
        assert (alert["first_step"], alert["step"], alert["status"]) == (1, 2, "acted")
        assert st.controls(run_id)[["who", "command", "status", "applied_step"]].rows() == [
            ("guard:always", "stop", "applied", 3)]
        assert st.run(run_id)["status"] == "stopped" and st.run_steps(run_id)["step"].to_list() == [1, 2]
