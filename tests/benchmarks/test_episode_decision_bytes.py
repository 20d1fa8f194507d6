"""`workbench bench episode-decision-bytes` at its smallest: the small tools organism, two steps per arm; the
figures it reports are the runs' own (episodes stored, each arm in a store of its own), every arm pays for
the decision columns (null in uniform's rows, they still cost each file), the arms that decide pay more, and
compaction merges the steps' files and cuts what the columns cost; the bound is judged on the largest
compacted figure. (Whether the small organism keeps the bound is not
asserted: at ~56 episodes a step its per-file column overhead is the larger part; docs/episode-allocation.md.)"""

from __future__ import annotations

import pytest

from benchmarks.episode_decision_bytes import bench_episode_decision_bytes
from workbench.store import open_store


@pytest.mark.slow
def test_every_arm_reports_what_its_decisions_add(new_store, tools_organism, tmp_path):
    from benchmarks.tiny import TINY_EPISODES, small_tools_recipe

    rec = small_tools_recipe().to_dict()
    extra = {"model.organism": rec, "model.device": "cpu", "task": dict(rec["task"], kind="arithmetic"),
             "allocator.prompts_per_step": 8,  # threshold 1: a tool result branches while its group has slots
             "rollout.episodes": dict(TINY_EPISODES["rollout.episodes"], arpo_threshold=1.0)}
    store = new_store(tmp_path / "store")
    out = bench_episode_decision_bytes(str(store), steps=2, budget=1000, extra=extra)
    arms = out["arms"]
    assert set(arms) == {"uniform", "roc", "arpo", "aepo", "both", "roc_aepo"}
    branched = {}
    for name, arm in arms.items():  # each arm in a store of its own under the given one
        with open_store(store / "episode-decision-bytes" / f"{name}-s0-2") as st:
            rows = st.rollouts(arm["run_id"], limit=100_000)
            assert arm["episodes"] == rows.height > 0
            branched[name] = int(rows["parent_idx"].is_not_null().sum())
    # ARPO's columns hold values only where it branched, which needs a tool call (the sampler's draw);
    # without a branch they are null, as uniform's
    deciding = ["roc", "both", "roc_aepo"] + [a for a in ("arpo", "aepo") if branched[a]]
    for state in ("as_committed", "compacted"):  # uniform's columns are null: they still cost their metadata
        fig = {name: arm[state] for name, arm in arms.items()}
        assert 0 < fig["uniform"]["decision_pct"] <= fig["uniform"]["with_tree_pct"]
        for name in deciding:
            assert fig[name]["decision_pct"] > fig["uniform"]["decision_pct"], (state, name, arms)
            assert fig[name]["decision_bytes_per_episode"] > 0 and fig[name]["store_bytes_per_episode_without"] > 0
    for arm in arms.values():  # compact merges each table's step files into one; the metadata is paid once
        assert arm["compacted"]["files"] == 4 < arm["as_committed"]["files"]
        assert arm["compacted"]["decision_bytes_per_episode"] < arm["as_committed"]["decision_bytes_per_episode"]
    for state in ("as_committed", "compacted"):
        assert out["decision_pct_max"][state] == max(a[state]["decision_pct"] for a in arms.values())
    assert out["within_bound"] == (max(out["decision_pct_max"].values()) <= 5.0)
