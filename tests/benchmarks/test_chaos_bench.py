"""R1 crash anywhere, the CI version: 5 SIGKILLs of a real run at different kill points, each followed by
a resume, then every stored row compared with an uninterrupted run of the same config and seed."""

from __future__ import annotations

import pytest

from benchmarks.chaos import KINDS, schedule, segments


def test_the_schedule_spreads_kinds_and_is_seeded():
    a = schedule(20, seed=0)
    assert a == schedule(20, seed=0) and a != schedule(20, seed=1)
    kinds = [k for k, _ in a]
    assert set(kinds) == set(KINDS) and max(kinds.count(k) for k in KINDS) - min(kinds.count(k) for k in KINDS) <= 1
    assert all(0 < u <= 1 for _, u in a)
    assert segments(24) == [8, 16, 24]


@pytest.mark.slow
def test_five_kills_lose_nothing_and_write_nothing_twice(organism_models, tmp_path):
    from benchmarks.chaos import bench_chaos

    out = bench_chaos(5, seed=3, steps=12, store_dir=tmp_path / "store", models=organism_models)
    assert out["kills"] == 5, out["kill_log"]
    assert out["resumed"] == 5
    assert out["steps_lost"] == 0 and out["steps_duplicated"] == 0
    assert out["rows_mismatched"] == {t: 0 for t in ("steps", "rollouts", "allocations", "prompt_stats", "evals")}
    assert out["controls_equal"] and out["weights_equal"]
    # (an edit to the package during the test would show here: see out["code_changed"])
    assert out["final_equal"] is True, f"code changed during the test: {out['code_changed']}"
    assert len(out["kills_by_point"]) >= 4  # spread over the points, not five of one kind


@pytest.mark.slow
def test_kills_of_an_async_run_train_every_step_once_within_its_bound(organism_models, tmp_path):
    """The asynchronous mode (eta = 1, a generator process ahead of the trainer): 3 SIGKILLs, each
    resumed; every step and every rollout stored once, the bound kept after every resume."""
    from benchmarks.chaos import bench_chaos

    out = bench_chaos(3, seed=3, steps=9, store_dir=tmp_path / "store", models=organism_models, eta=1)
    assert out["kills"] == 3 and out["resumed"] == 3, out["kill_log"]
    assert out["steps_lost"] == 0 and out["steps_duplicated"] == 0
    assert out["rollouts_lost"] == 0 and out["rollouts_extra"] == 0 and out["rollouts_twice"] == 0
    assert out["staleness_max"] <= 1 and out["allocations_on_newer_stats"] == 0
    assert out["ok"] is True, out
