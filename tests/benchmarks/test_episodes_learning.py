"""`workbench bench episodes-learning` at its smallest: the small tools organism, two seeds, two steps per
arm; the figures it reports agree with the runs it made (never a value that depends on the draw)."""

from __future__ import annotations

import pytest

from benchmarks.episodes_learning import bench_episodes_learning, t_interval
from workbench.store import open_store


def test_the_t_interval_is_the_textbook_one():
    assert t_interval([1.0]) is None
    lo, hi = t_interval([0.1, 0.2, 0.3])  # mean 0.2, sd 0.1, t(0.95, 2) = 2.920
    assert lo == pytest.approx(0.2 - 2.920 * 0.1 / 3 ** 0.5, abs=1e-4) and hi == pytest.approx(0.2 + 2.920 * 0.1 / 3 ** 0.5, abs=1e-4)


@pytest.mark.slow
def test_both_arms_train_and_report_what_they_did(new_store, tools_organism, tmp_path):
    from benchmarks.tiny import TINY_EPISODES, small_tools_recipe

    rec = small_tools_recipe().to_dict()
    extra = {"model.organism": rec, "model.device": "cpu", "task": dict(rec["task"], kind="arithmetic"),
             "allocator.prompts_per_step": 8, "eval.samples": 2, "eval.max_prompts": 8,
             "rollout.episodes": TINY_EPISODES["rollout.episodes"]}
    store = new_store(tmp_path / "store")
    out = bench_episodes_learning(str(store), seeds=(0, 1), steps=2, budget=200, extra=extra)
    assert out["seeds"] == [0, 1] and set(out["tool"]) == set(out["no_tool"]) == {"0", "1"}
    with open_store(store) as st:
        for arm, shape in (("tool", "episodes"), ("no_tool", "independent")):
            for r in out[arm].values():
                rows = st.rollouts(r["run_id"], limit=100_000)
                assert set(rows["shape"].drop_nulls()) <= {shape} and rows.height == r["rollouts"]
                assert r["rise"] == pytest.approx(r["pass1_end"] - r["pass1_start"], abs=1e-3)
                assert r["model_tokens"] == int(rows["length"].sum())
    assert len(out["tool"]["0"]["call_rate"]) == 2 and all(0 <= x <= 1 for x in out["tool"]["0"]["tool_error_rate"])
    diffs = [out["tool"][s]["pass1_end"] - out["no_tool"][s]["pass1_end"] for s in ("0", "1")]
    assert out["summary"]["end_diff_mean"] == pytest.approx(sum(diffs) / 2, abs=1e-3)
    assert out["summary"]["end_diff_excludes_0"] == (out["summary"]["end_diff_ci90"][0] > 0)
