"""Allocation inside episodes (issue #41) in the training loop, on the small tools organism with the real
calculator: GRPO-RoC samples twice each grant, keeps the grant by its rule, stores the dropped episodes
marked and never trains on them; with oversampling off a run is the uniform run, row for row."""

from __future__ import annotations

import polars as pl

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


def test_roc_off_is_the_uniform_run(store_dir, tiny_tools_config):
    """roc_oversample = 1 (its minimums changed, to show they are not read): the same episodes, rewards,
    advantages and updates as a run without the option."""
    out = []
    for over in ({}, {"rollout__episodes__roc_oversample": 1, "rollout__episodes__roc_min_correct": 5}):
        cfg = tiny_tools_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0, **over)
        out.append(_rows(store_dir, run(cfg, store=str(store_dir)))[0])
    a, b = out
    assert a.height == b.height == 64 and a["filter_kept"].null_count() == a.height
    assert a.select(COLS).to_dicts() == b.select(COLS).to_dicts()
