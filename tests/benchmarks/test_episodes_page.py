"""`workbench bench episodes-page` at its smallest: both stores written through the store's writer read
back as what was written (episodes of 6 turns with two calculator calls; single-turn rollouts), and the
Rollouts page runs on each without an exception (the timing itself is never asserted)."""

from __future__ import annotations

import pytest

from benchmarks.episodes_page import bench_episodes_page, build_store
from workbench.store import open_store


def test_the_episode_store_holds_six_turn_episodes_and_the_other_none(tmp_path):
    rid = build_store(tmp_path / "ep", 40, multi_turn=True, steps=2)
    one = build_store(tmp_path / "one", 40, multi_turn=False, steps=2)
    with open_store(tmp_path / "ep") as st:
        rows = st.rollouts(rid, limit=1000)
        assert rows.height == 40 and set(rows["turns"]) == {6} and set(rows["tool_calls"]) == {2}
        r = rows.row(0, named=True)
        ep = st.episode(rid, r["step"], r["stage"], r["prompt_id"], r["idx"])
        assert [t.role for t in ep.turns] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert r["length"] == ep.model_tokens == len(r["token_ids"])
    with open_store(tmp_path / "one") as st:
        assert not st.has_episodes(one) and st.rollouts(one, limit=1000).height == 40


def test_the_allocated_store_holds_arpo_trees_with_rocs_decisions(tmp_path):
    rid = build_store(tmp_path / "alloc", 40, multi_turn=True, steps=2, allocated=True)
    with open_store(tmp_path / "alloc") as st:
        rows = st.rollouts(rid, limit=1000)
        assert rows.height == 40 and rows["filter_kept"].sum() == 20
        branches = rows.filter(rows["parent_idx"].is_not_null())
        assert branches.height == 20 and set(branches["branch_at"]) == {15}
        for r in branches.to_dicts():  # a branch's first turns are its parent's, up to its branch point
            mine = st.episode(rid, r["step"], r["stage"], r["prompt_id"], r["idx"]).response_token_ids()
            theirs = st.episode(rid, r["step"], r["stage"], r["prompt_id"], r["parent_idx"]).response_token_ids()
            assert mine[:15] == theirs[:15] and r["branch_draw"] is not None


@pytest.mark.slow
def test_the_page_runs_on_both_stores(tmp_path):
    out = bench_episodes_page(str(tmp_path), episodes=40, repeats=1)
    page = out["rollouts_page"]
    for label in ("episodes", "single_turn", "allocated"):
        assert page[label]["cold"]["median"] > 0 and page[label]["cached"]["median"] > 0
    assert out["meets_targets"] == all(page[k]["cold"]["median"] <= 700 and page[k]["cold"]["p95"] <= 2000
                                       for k in ("episodes", "allocated"))
