"""AEPO (arXiv 2510.14545) and ARPO's hard attribution in the training loop, on the small tools organism with the
real calculator: AEPO's split, branches and penalties are stored and recomputable from what is stored; the
entropy-balanced loss trains; ARPO with hard attribution trains on the same episodes as soft; and with both off a
run is the uniform run, row for row."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.engine import run
from workbench.metrics import CATALOGUE, lookup
from workbench.rollout.episode_decode import aepo_branches
from workbench.rollout.shapes.arpo import aepo_split_size
from workbench.store import open_store

COLS = ["step", "stage", "prompt_id", "idx", "token_ids", "response", "reward", "advantage", "finish_reason",
        "tool_calls", "tool_errors", "used_in_update"]
OFF = dict(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0)


def _rows(store_dir, rid) -> tuple[pl.DataFrame, pl.DataFrame]:
    with open_store(str(store_dir)) as st:
        return (st.rollouts(rid, limit=100_000).sort(["step", "stage", "prompt_id", "idx"]),
                st.allocations(rid))


def test_aepo_stores_its_split_and_branches_and_trains_with_the_balanced_loss(store_dir, tiny_tools_config):
    """arpo_threshold = 0: AEPO's draw (u + 0.2 dH) * (1 - 0.05 c) >= 0 branches unless the entropy fell far."""
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(**dict(OFF, steps=3), rollout__episodes__aepo_branch=True,
                            rollout__episodes__arpo_threshold=0.0,
                            algorithm__loss="aepo_clip", algorithm__entropy_advantage=0.2)
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, alloc = _rows(store_dir, rid)
    assert rows.height == int(alloc["granted"].sum()) == 96
    granted = {(a["step"], a["prompt_id"]): a["granted"] for a in alloc.to_dicts()}
    for (step, pid), g in rows.group_by(["step", "prompt_id"]):
        g = g.sort("idx")
        n = granted[(step, pid)]
        assert g["branch_split"].null_count() == n - 1 and g["branch_split"][0] is not None  # on the probe, idx 0
        assert g["parent_idx"][0] is None and g["branch_split_dh"][0] is not None
        m = aepo_split_size(n, float(g["branch_split_dh"][0]), 0.5)
        assert g["branch_split"][0] == m  # the group's split, recomputed from its stored probe
        assert g.filter(pl.col("parent_idx").is_null()).height >= m  # m whole (the probe first), then the fill
    branched = rows.filter(pl.col("parent_idx").is_not_null())
    assert branched.height == sum(seen[s]["episodes/aepo_branches"] for s in (1, 2, 3)) > 0
    assert branched["branch_rounds"].null_count() == 0 and rows["branch_rounds"].null_count() == rows.height - \
        branched.height
    by_idx = {(r["step"], r["stage"], r["prompt_id"], r["idx"]): r for r in rows.to_dicts()}
    with open_store(str(store_dir)) as st:
        eps = st.episodes(rid, list(by_idx))
    for r in branched.to_dicts():
        before, after = r["branch_entropy_before"], r["branch_entropy_after"]
        u, c = r["branch_draw"], r["branch_rounds"]
        assert aepo_branches(u + 1e-6, before, after, 0.2, 0.0, 0.05, c)  # the stored decision (float32) branches
        mine = eps[(r["step"], r["stage"], r["prompt_id"], r["idx"])].response_token_ids()
        theirs = eps[(r["step"], r["stage"], r["prompt_id"], r["parent_idx"])].response_token_ids()
        assert mine[:r["branch_at"]] == theirs[:r["branch_at"]] and 0 < r["branch_at"] < len(mine)
    for s in (1, 2, 3):
        assert seen[s]["episodes/aepo_whole"] + seen[s]["episodes/aepo_branches"] + seen[s]["episodes/aepo_fill"] == 32
        _trained_where_signal(seen[s])
    names = set().union(*(m.keys() for m in seen.values()))
    assert sorted(n for n in names if lookup(n) is None) == []
    assert {m.name for m in CATALOGUE if m.present == "aepo"} <= names
    # the decision columns' share of an episode's stored bytes. The issue's 5% bound is checked by
    # `workbench bench episode-decision-bytes` on the tools organism: here the tiny organism's episodes are a
    # few hundred bytes and the seven columns' fixed Parquet overhead over 96 rows alone is near it (4.8% on one
    # machine's draws; 5.04% over 64 rows), so which episodes a machine draws decides the last tenths.
    # What a test can hold on any draw: the columns cost something, and nothing like a second copy of the row.
    from benchmarks.episode_allocation import decision_bytes

    with open_store(str(store_dir)) as st:
        pct = decision_bytes(rows, st.episode_turns(rid), st.episode_tool_calls(rid), alloc)
        assert 0 < pct < 10.0


def _trained_where_signal(metrics: dict) -> None:
    """A step with a group that carries signal trained on tokens (which groups carry signal is the sampler's
    draw: a step without any, which skips its update, can happen on another machine)."""
    if metrics["rollout/zero_signal_frac"] < 1.0:
        assert metrics["train/tokens"] > 0


def test_aepo_and_hard_off_are_the_uniform_run(store_dir, tiny_tools_config):
    """aepo_branch off and hard attribution without branches (AEPO's other settings changed, to show they are
    not read): the same episodes, rewards, advantages and updates as a run without the options."""
    out = []
    for over in ({}, {"rollout__episodes__aepo_branch": False, "rollout__episodes__aepo_beta": 3.0,
                      "rollout__episodes__aepo_penalty": 0.5, "rollout__episodes__aepo_split": False,
                      "rollout__episodes__arpo_advantage": "hard", "algorithm__entropy_advantage": 0.0}):
        seen: dict[int, dict] = {}
        rid = run(tiny_tools_config(**OFF, **over), store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
        out.append((_rows(store_dir, rid)[0], seen))
    (a, ma), (b, mb) = out
    assert a.height == b.height == 64 and a["branch_split"].null_count() == a.height
    assert a.select(COLS).to_dicts() == b.select(COLS).to_dicts()
    assert [ma[s].get("train/loss") for s in (1, 2)] == [mb[s].get("train/loss") for s in (1, 2)]  # None: no signal


def test_arpo_hard_attribution_trains_on_its_branches(store_dir, tiny_tools_config):
    """A run with hard attribution: branches made and stored as soft's are, the stored advantage the row's GRPO
    advantage (zero-sum over each group in the update), the update trained (the attribution itself:
    tests/rollout/test_aepo.py)."""
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(**OFF, rollout__episodes__arpo_branch=True, rollout__episodes__arpo_threshold=1.0,
                            rollout__episodes__arpo_advantage="hard")
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, alloc = _rows(store_dir, rid)
    assert rows.height == int(alloc["granted"].sum()) == 64 and rows["parent_idx"].is_not_null().sum() > 0
    sums = rows.filter(pl.col("used_in_update")).group_by(["step", "prompt_id"]).agg(pl.col("advantage").sum())
    assert (sums["advantage"].abs() < 1e-5).all()
    for s in (1, 2):
        _trained_where_signal(seen[s])


def test_aepo_without_its_split_keeps_arpos_plan_and_its_own_rule(store_dir, tiny_tools_config):
    """aepo_split = false: no probe, ARPO's plan (2 of each group of 4 whole, 2 slots), AEPO's penalised rule."""
    seen: dict[int, dict] = {}
    cfg = tiny_tools_config(**dict(OFF, steps=1), rollout__episodes__aepo_branch=True,
                            rollout__episodes__aepo_split=False, rollout__episodes__arpo_threshold=0.0)
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows, _ = _rows(store_dir, rid)
    assert rows.height == 32 and rows["branch_split"].null_count() == 32 and "episodes/aepo_whole" not in seen[1]
    assert seen[1]["episodes/aepo_branches"] + seen[1]["episodes/aepo_fill"] == 16  # 8 groups x 2 slots
    branched = rows.filter(pl.col("parent_idx").is_not_null())
    assert branched.height == seen[1]["episodes/aepo_branches"] and branched["branch_rounds"].null_count() == 0


def test_the_entropy_advantage_reaches_the_update(store_dir, tiny_tools_config):
    """Whole episodes (no branching: the first step's rows are the same in both runs): with
    `entropy_advantage = 0.2` the same rows and row advantages are trained with other token advantages, so
    the first step's policy loss moves; the balanced clip alone (on-policy, every ratio 1) leaves it as it is."""
    out = {}
    for name, over in (("plain", {}), ("clip", {"algorithm__loss": "aepo_clip"}),
                       ("scaled", {"algorithm__entropy_advantage": 0.2})):
        seen: dict[int, dict] = {}
        rid = run(tiny_tools_config(**dict(OFF, steps=1), **over), store=str(store_dir),
                  on_step=lambda s, m: seen.__setitem__(s, m))
        out[name] = (_rows(store_dir, rid)[0].select(COLS).to_dicts(), seen[1])
    assert out["plain"][0] == out["clip"][0] == out["scaled"][0]
    if not any(r["advantage"] for r in out["plain"][0]):
        pytest.skip("no group carried a signal on this machine's draws")
    assert out["plain"][1]["train/pg_loss"] == out["clip"][1]["train/pg_loss"]
    assert out["plain"][1]["train/ratio_max"] == 1.0
    assert out["scaled"][1]["train/pg_loss"] != pytest.approx(out["plain"][1]["train/pg_loss"], rel=1e-4, abs=1e-6)
