"""`workbench bench episodes` at its smallest: a small tools organism on two levels, both arms on the same
prompts and seeds; what it measures is consistent with the episodes it sampled (never a timing's value)."""

from __future__ import annotations

import pytest

from benchmarks.episodes_bench import bench_episodes

SMALL = dict(hidden_size=64, layers=2, heads=2, ffn_size=128, max_positions=48, steps=150, batch_size=64,
             warmup_steps=10, lr=3e-3, threads=1, tool_share=0.5)
TASK = dict(levels=["1+1", "2*2"], train_size=300, eval_per_level=8)


@pytest.mark.slow
def test_both_arms_on_the_same_prompts_with_the_real_calculator(tmp_path):
    out = bench_episodes(str(tmp_path / "store"), samples=4, organism=SMALL, task=TASK)
    assert out["prompts"] == 16 and out["samples"] == 4
    for arm in ("with_tool", "without_tool"):
        r = out[arm]
        assert r["episodes"] == 64 and 0 <= r["pass1"] <= r["pass4"] <= 1
        assert r["pass1_ci90"][0] <= r["pass1"] <= r["pass1_ci90"][1]
        assert 0 <= r["call_rate"] <= 1 and sum(r["finish_reasons"].values()) == 64
        assert set(r["levels"]) == {"1", "2"}
    # the same seeds: the first turns are the same draws, so both arms call the tool in the same episodes
    assert out["with_tool"]["call_rate"] == out["without_tool"]["call_rate"]
    if out["without_tool"]["calls"]:
        assert out["without_tool"]["tool_error_rate"] == 1.0  # every call answered unknown_tool
    assert out["pass1_gain"] == pytest.approx(out["with_tool"]["pass1"] - out["without_tool"]["pass1"], abs=1e-4)
