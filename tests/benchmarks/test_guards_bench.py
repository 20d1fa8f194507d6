"""The guards bench's parts that need no run: the hacked reward, each fault's delay judged against the
earliest step its guard could fire, and the configs of the clean and faulty runs (the runs themselves
are measured by `workbench bench guards`, see docs/guards.md)."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks import guards_bench as gb


def test_the_hacked_reward_pays_short_training_answers_and_keeps_the_true_verifier_for_eval():
    train, held_out = SimpleNamespace(split="train"), SimpleNamespace(split="eval")
    assert gb.short_answers_pay("12", "57", train) == 1.0 and gb.short_answers_pay("123", "123", train) == 0.0
    assert gb.short_answers_pay("12", "57", held_out) == 0.0 and gb.short_answers_pay("123", "123", held_out) == 1.0


def _run(*alerts):
    return {"run_id": "r", "final_pass1": 0.05, "status": "finished", "error": None,
            "alerts": [dict(guard=g, first_step=a, step=b, action=act, status="acted", outcome="")
                       for g, a, b, act in alerts]}


def test_delay_is_judged_from_the_first_step_that_can_show_the_fault():
    # a learning rate shows one step after its command: entropy_blowup (window 2) fires at F + 2 at the earliest
    lr = gb._fault("lr_x100", _run(("entropy_blowup", 10, 11, "rollback")), 8, [0.04, 0.06])
    assert (lr["delay_steps"], lr["earliest_delay_steps"], lr["within_window_plus_1"]) == (3, 2, True)
    assert lr["recovered"] is True
    # a temperature is sampled with at once: F + 1 at the earliest, so F + 3 is late
    hot = gb._fault("temperature", _run(("zero_signal", 2, 6, "alert"), ("entropy_blowup", 10, 11, "alert")), 8, None)
    assert (hot["guard"], hot["delay_steps"], hot["within_window_plus_1"]) == ("entropy_blowup", 3, False)
    assert hot["false_alarms_before_fault"] == 1 and "recovered" not in hot
    missed = gb._fault("non_finite_loss", _run(), 8, None)
    assert not missed["detected"] and not missed["within_window_plus_1"]


def test_every_run_config_validates():
    for p in gb.PROFILES:
        cfg = gb._config(16, 0, "small", task=gb._task("small", profile=p), **gb.PROFILE_OVER[p])
        assert cfg.task["profile"] == p and cfg.model.organism["task"]["profile"] == p
        assert {g.preset for g in cfg.guards} == {"entropy_blowup", "reward_collapse", "reward_hacking"}
        for preset in ("entropy_blowup", "reward_collapse"):
            g = next(g for g in cfg.guards if g.preset == preset)
            assert g.action == "rollback" and g.settings == {"temperature": 1.0, "lr": cfg.optim.lr}
    assert gb._config(16, 0, "default", task=gb._task("default", gb.VERIFIER)).task["verifier"] == gb.VERIFIER


def test_an_unknown_fault_or_profile_is_one_line_and_runs_nothing(tmp_path):
    import pytest

    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^bench guards: --fault: 'lr_x1000' is not allowed \(one of temperature, "):
        gb.run_bench(tmp_path, steps=4, faults=("lr_x1000",))
    with pytest.raises(ConfigError, match=r"^bench guards: --profile: 'short' is not allowed"):
        gb.run_bench(tmp_path, steps=4, profiles=("short",))
    assert not any(tmp_path.iterdir())


def test_guard_cost_bench_times_both_shapes():
    """`workbench bench guard-cost` on a small size: each shape timed on the columns' path and the plain loop."""
    from benchmarks.guard_cost import guard_cost

    out = guard_cost(rollouts_per_step=32, steps=2, plain_steps=1)
    assert out["organism"]["chars_per_response"] <= 3 and out["long"]["chars_per_response"] == 1600
    for shape in ("organism", "long"):
        assert out[shape]["cpu_ms_per_step"] >= 0 and out[shape]["plain_cpu_ms_per_step"] > 0
