"""Allocation inside episodes (issue #41) in the training loop, on the small tools organism with the real
calculator: GRPO-RoC samples twice each grant, keeps the grant by its rule, stores the dropped episodes
marked and never trains on them; ARPO grows each grant as a tree of episodes; with both off a run is the
uniform run, row for row."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.engine import run
from workbench.metrics import CATALOGUE, lookup
from workbench.store import open_store

COLS = ["step", "stage", "prompt_id", "idx", "token_ids", "response", "reward", "advantage", "finish_reason",
        "tool_calls", "tool_errors", "used_in_update"]


def _rows(store_dir, rid) -> tuple[pl.DataFrame, pl.DataFrame]:
    with open_store(str(store_dir)) as st:
        return (st.rollouts(rid, limit=100_000).sort(["step", "stage", "prompt_id", "idx"]),
                st.allocations(rid))


def test_roc_keeps_the_grant_stores_the_dropped_and_never_trains_on_them(store_dir, tiny_tools_config):
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0,
                            rollout__episodes__roc_oversample=2)
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, alloc = _rows(store_dir, rid)
    granted = alloc.group_by(["step", "prompt_id"]).agg(pl.col("granted").sum())
    assert rows.height == 2 * int(granted["granted"].sum()) == 128  # 32 granted a step, 64 sampled
    assert rows["filter_kept"].null_count() == 0 and rows["filter_reason"].null_count() == 0
    per = rows.group_by(["step", "prompt_id"]).agg(pl.col("filter_kept").sum().alias("kept"), pl.len().alias("n"))
    per = per.join(granted, on=["step", "prompt_id"])
    assert (per["kept"] == per["granted"]).all() and (per["n"] == 2 * per["granted"]).all()
    dropped = rows.filter(~pl.col("filter_kept"))
    assert not dropped["used_in_update"].any() and (dropped["advantage"] == 0).all()
    for (step, pid), g in rows.group_by(["step", "prompt_id"]):
        right = g.filter(pl.col("correct"))
        kept, out = right.filter(pl.col("filter_kept")), right.filter(~pl.col("filter_kept"))
        if kept.height and out.height:  # no dropped correct episode has a lower penalty than a kept one
            assert kept["filter_penalty"].max() <= out["filter_penalty"].min()
        assert set(right["filter_reason"]) <= {"correct_low_penalty", "correct_high_penalty"}
        assert set(g.filter(~pl.col("correct"))["filter_reason"]) <= {"wrong_sampled", "wrong_not_sampled"}
        n_c, n_w = right.height, g.height - right.height
        assert kept.height == int(round(n_c / 2)) or min(n_c, 2) == kept.height or n_w < 2 or n_c < 2
    # the penalty is the stored episode's: tool error ratio (0.5 without a call) + 1 unless it ended "stop"
    for r in rows.to_dicts():
        ratio = 0.5 if not r["tool_calls"] else r["tool_errors"] / r["tool_calls"]
        assert abs(r["filter_penalty"] - (ratio + (r["finish_reason"] != "stop"))) < 1e-6
    # every decision in words: each group's allocation says what RoC kept
    assert alloc["reason"].str.contains("roc: kept").all()
    # the figures: sampled and dropped per step, in the catalogue
    for step in (1, 2):
        m = seen[step]
        assert m["episodes/roc_sampled"] == 64 and m["episodes/roc_dropped"] == 32
        assert m["episodes/roc_dropped_model_tokens"] > 0
        assert 0 <= m["episodes/roc_kept_correct_tool_error_rate"] <= 1
    names = set().union(*(m.keys() for m in seen.values()))
    assert sorted(n for n in names if lookup(n) is None) == []
    assert {m.name for m in CATALOGUE if m.present == "roc"} <= names
    _decision_bytes_under_5_percent(store_dir, rid, rows, alloc)


def _decision_bytes_under_5_percent(store_dir, rid, rows, alloc):
    """The issue's bound: the decision columns (and RoC's reason text) add at most 5% to an episode's bytes
    (Parquet, zstd; `benchmarks.episode_allocation.decision_bytes`), and more than nothing."""
    from benchmarks.episode_allocation import decision_bytes

    with open_store(str(store_dir)) as st:
        turns, calls = st.episode_turns(rid), st.episode_tool_calls(rid)
    assert 0 < decision_bytes(rows, turns, calls, alloc) <= 5.0


def test_roc_and_arpo_off_are_the_uniform_run(store_dir, tiny_tools_config):
    """roc_oversample = 1 and arpo_branch off (their other settings changed, to show they are not read): the
    same episodes, rewards, advantages and updates as a run without the options."""
    out = []
    for over in ({}, {"rollout__episodes__roc_oversample": 1, "rollout__episodes__roc_min_correct": 5,
                      "rollout__episodes__arpo_branch": False, "rollout__episodes__arpo_initial": 0.25,
                      "rollout__episodes__arpo_threshold": 1.0}):
        cfg = tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0, **over)
        out.append(_rows(store_dir, run(cfg, store=str(store_dir)))[0])
    a, b = out
    assert a.height == b.height == 64 and a["filter_kept"].null_count() == a.height
    assert a.select(COLS).to_dicts() == b.select(COLS).to_dicts()


def test_arpo_grows_each_group_to_its_grant_as_a_tree_of_stored_episodes(store_dir, tiny_tools_config):
    """arpo_threshold = 1: every tool result read while a group has slots makes a branch. Each prompt's
    rows are its grant; a branch's stored tokens are its parent's up to a tool result; its decision is
    stored; the figures add up."""
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0,
                            rollout__episodes__arpo_branch=True, rollout__episodes__arpo_threshold=1.0)
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, alloc = _rows(store_dir, rid)
    assert rows.height == int(alloc["granted"].sum()) == 64
    by_idx = {(r["step"], r["stage"], r["prompt_id"], r["idx"]): r for r in rows.to_dicts()}
    branched = rows.filter(pl.col("parent_idx").is_not_null())
    assert branched.height == sum(seen[s]["episodes/arpo_branches"] for s in (1, 2)) > 0
    with open_store(str(store_dir)) as st:  # the whole responses, tool results included (`branch_at` counts them)
        eps = st.episodes(rid, list(by_idx))
    for r in branched.to_dicts():
        key = (r["step"], r["stage"], r["prompt_id"], r["idx"])
        mine = eps[key].response_token_ids()
        theirs = eps[(r["step"], r["stage"], r["prompt_id"], r["parent_idx"])].response_token_ids()
        at = r["branch_at"]
        assert mine[:at] == theirs[:at] and 0 < at < len(mine)
        assert r["branch_draw"] is not None and r["branch_entropy_before"] is not None
    assert rows.filter(pl.col("parent_idx").is_null())["branch_draw"].null_count() == rows.height - branched.height
    for s in (1, 2):  # each group of 4: 2 whole, then its 2 slots taken by branches or filled whole
        assert seen[s]["episodes/arpo_branches"] + seen[s]["episodes/arpo_fill"] == 16
        assert seen[s]["episodes/arpo_draws"] >= seen[s]["episodes/arpo_branches"]
    names = set().union(*(m.keys() for m in seen.values()))
    assert {m.name for m in CATALOGUE if m.present == "arpo"} <= names
    _decision_bytes_under_5_percent(store_dir, rid, rows, alloc)


def test_a_branch_prefix_counts_once_against_a_token_budget():
    """Row 1 branched from row 0 at response position 4 (3 model tokens and 1 tool token before it): the
    budget's spend is 5 + 6 - 3 model tokens."""
    import numpy as np
    import torch

    from workbench.engine.episode_filter import shared_model_tokens
    from workbench.engine.steplog import Rollouts
    from workbench.rollout.shapes import empty_columns

    r = Rollouts.empty()
    mask = torch.tensor([[1, 1, 1, 0, 1, 1, 0], [1, 1, 1, 0, 1, 1, 1]], dtype=torch.bool)
    r.tokens, r.lengths = torch.zeros((2, 7), dtype=torch.long), torch.tensor([6, 7])
    r.loss_mask, r.shape = mask, empty_columns(2, "episodes")
    r.shape["branch_at"] = np.array([-1, 4])
    assert r.model_tokens().tolist() == [5, 6] and shared_model_tokens(r) == 3


@pytest.mark.slow
def test_roc_over_an_arpo_branched_oversampled_group(store_dir, tiny_tools_config):
    """Both on: each grant of 4 is sampled as one ARPO group of 8 (4 whole, 4 branch slots, threshold 1 so
    that tool results branch), then RoC keeps 4 of the 8. The rollout budget (32 a step) counts the grants
    and is never exceeded; every sampled episode is stored with RoC's decision, every branch with ARPO's;
    a kept branch may have a dropped parent (the tree stays whole in the store); only kept rows train."""
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0,
                            rollout__episodes__roc_oversample=2, rollout__episodes__arpo_branch=True,
                            rollout__episodes__arpo_threshold=1.0)
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, alloc = _rows(store_dir, rid)
    per_step = alloc.group_by("step").agg(pl.col("granted").sum(), pl.col("budget").max(), pl.col("budget_left").min())
    assert (per_step["granted"] <= per_step["budget"]).all() and (per_step["budget_left"] >= 0).all()
    assert per_step["granted"].to_list() == [32, 32]
    assert rows.height == 2 * int(alloc["granted"].sum()) == 128
    assert rows["filter_kept"].null_count() == 0 and rows["filter_penalty"].null_count() == 0
    granted = alloc.group_by(["step", "prompt_id"]).agg(pl.col("granted").sum())
    per = rows.group_by(["step", "prompt_id"]).agg(pl.col("filter_kept").sum().alias("kept"), pl.len().alias("n"))
    per = per.join(granted, on=["step", "prompt_id"])
    assert (per["kept"] == per["granted"]).all() and (per["n"] == 2 * per["granted"]).all()
    branched = rows.filter(pl.col("parent_idx").is_not_null())
    assert branched.height == sum(seen[s]["episodes/arpo_branches"] for s in (1, 2)) > 0
    assert branched["branch_draw"].null_count() == 0 and branched["branch_entropy_before"].null_count() == 0
    for s in (1, 2):  # each oversampled group of 8: 4 whole, 4 slots taken by branches or filled whole
        assert seen[s]["episodes/arpo_branches"] + seen[s]["episodes/arpo_fill"] == 32
        assert seen[s]["episodes/roc_sampled"] == 64 and seen[s]["episodes/roc_dropped"] == 32
    assert (branched["parent_idx"] < branched["idx"]).all()  # a parent is a slot of the same group, made first
    dropped = rows.filter(~pl.col("filter_kept"))
    assert not dropped["used_in_update"].any() and (dropped["advantage"] == 0).all()
    assert alloc["reason"].str.contains("roc: kept").all()
