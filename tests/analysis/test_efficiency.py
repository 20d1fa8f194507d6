"""Allocation efficiency figures against counts done by hand."""

import polars as pl
import pytest

from workbench.analysis import (
    allocation_efficiency,
    grants_by_step,
    group_outcomes,
    rollouts_by_difficulty,
    zero_signal_by_step,
)


def _rollouts():
    groups = {  # (run, step, prompt): rewards
        ("a", 0, "p0"): [1, 0, 1, 1],      # signal, pass 0.75
        ("a", 0, "p1"): [0, 0, 0, 0],      # zero signal, all wrong
        ("a", 0, "p2"): [1, 1],            # zero signal, all correct
        ("a", 1, "p0"): [1, 0, 0, 0, 0, 0, 0, 0],  # signal, pass 0.125 (two stages pooled)
        ("b", 0, "p0"): [0.0, 0.5],        # signal with partial reward (0.5 counts as correct)
    }
    rows = []
    for (run, step, prompt), rewards in groups.items():
        for i, r in enumerate(rewards):
            rows.append({"run_id": run, "step": step, "stage": int(i >= 4), "prompt_id": prompt, "idx": i,
                         "reward": float(r), "length": 10 + i})
    return pl.DataFrame(rows)


def test_group_outcomes():
    g = group_outcomes(_rollouts())
    assert g.height == 5
    row = g.filter((pl.col("run_id") == "a") & (pl.col("step") == 1)).row(0, named=True)
    assert row["rollouts"] == 8 and row["correct"] == 1 and row["pass_rate"] == 0.125 and row["signal"]
    assert row["tokens"] == sum(10 + i for i in range(8))


def test_zero_signal_by_step():
    out = zero_signal_by_step(_rollouts())
    a0 = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 0)).row(0, named=True)
    assert a0["groups"] == 3 and a0["zero_signal_groups"] == 2
    assert a0["zero_signal_frac"] == pytest.approx(2 / 3)
    assert a0["all_correct_groups"] == 1 and a0["all_wrong_groups"] == 1
    assert a0["rollouts"] == 10 and a0["informative_rollouts"] == 4
    assert a0["informative_per_1000"] == pytest.approx(400.0)


def test_allocation_efficiency_per_run():
    out = allocation_efficiency(_rollouts()).sort("run_id")
    a = out.row(0, named=True)
    assert a["rollouts"] == 18 and a["informative_rollouts"] == 12
    assert a["informative_per_1000"] == pytest.approx(1000 * 12 / 18)
    assert a["zero_signal_frac"] == pytest.approx(2 / 4)
    assert out.row(1, named=True)["zero_signal_frac"] == 0.0


def test_rollouts_by_difficulty_observed():
    out = rollouts_by_difficulty(_rollouts(), bins=4)
    a = out.filter(pl.col("run_id") == "a")
    # pass rates: 0.75 -> bin 3, 0.0 -> bin 0, 1.0 -> bin 3 (clipped), 0.125 -> bin 0
    assert a["bin"].to_list() == [0, 3]
    assert a["groups"].to_list() == [2, 2]
    assert a["rollouts_per_prompt"].to_list() == [6.0, 3.0]
    assert a["zero_signal_frac"].to_list() == [0.5, 0.5]
    assert a["bin_low"].to_list() == [0.0, 0.75] and a["bin_high"].to_list() == [0.25, 1.0]


def _allocations():
    return pl.DataFrame({
        "run_id": ["a", "a", "a", "a", "a", "b"],
        "step": [0, 0, 0, 1, 1, 0],
        "stage": [0, 0, 0, 0, 1, 0],
        "prompt_id": ["p0", "p1", "p2", "p0", "p0", "p0"],
        "asked": [4, 4, 2, 4, 8, 2],
        "granted": [4, 4, 2, 4, 4, 2],
        "predicted_pass": [0.6, 0.1, 0.9, 0.3, 0.05, 0.5],
    })


def test_rollouts_by_difficulty_predicted_uses_first_stage():
    out = rollouts_by_difficulty(_rollouts(), _allocations(), difficulty="predicted", bins=2)
    a = out.filter(pl.col("run_id") == "a")
    # predicted at stage 0: 0.6, 0.1, 0.9, 0.3 -> bins 1, 0, 1, 0
    assert a["bin"].to_list() == [0, 1]
    assert a["rollouts_per_prompt"].to_list() == [(4 + 8) / 2, (4 + 2) / 2]
    with pytest.raises(ValueError, match="allocations"):
        rollouts_by_difficulty(_rollouts(), difficulty="predicted")
    with pytest.raises(ValueError, match="difficulty"):
        rollouts_by_difficulty(_rollouts(), difficulty="hardness")


def test_grants_by_step():
    out = grants_by_step(_allocations())
    a1 = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 1)).row(0, named=True)
    assert a1["prompts"] == 1 and a1["stages"] == 2 and a1["asked"] == 12 and a1["granted"] == 8
    assert a1["topped_up_prompts"] == 1
    a0 = out.filter((pl.col("run_id") == "a") & (pl.col("step") == 0)).row(0, named=True)
    assert a0["prompts"] == 3 and a0["stages"] == 1 and a0["topped_up_prompts"] == 0
