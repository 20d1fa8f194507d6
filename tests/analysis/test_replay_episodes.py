"""`workbench replay RUN --episodes` (workbench/analysis/replay_episodes.py) on real runs of the small tools
organism with the calculator: GRPO-RoC replayed at the run's own factor takes the run's own decision on the
correct side, episode for episode, and keeps each grant; at a smaller factor it reads the first episodes of
each group; ARPO's spend on a branched run counts a branch's shared prefix once; and each case the store
cannot answer is refused in one line naming why."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from workbench.analysis.replay_episodes import episode_replay
from workbench.cli import app
from workbench.engine import run
from workbench.store import open_store

pytestmark = pytest.mark.slow  # five real runs for the module (~25 s on 2 cores)
QUIET = dict(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0)
ROC = dict(rollout__episodes__roc_oversample=2)
ARPO = dict(rollout__episodes__arpo_branch=True, rollout__episodes__arpo_threshold=1.0)


@pytest.fixture(scope="module")
def runs(new_store, tiny_tools_config, tiny_config, tmp_path_factory):
    root = new_store(tmp_path_factory.mktemp("replay-episodes") / "store")
    ids = {name: run(tiny_tools_config(name=name, **QUIET, **over), store=str(root))
           for name, over in (("uniform", {}), ("roc", ROC), ("arpo", ARPO), ("both", {**ROC, **ARPO}))}
    ids["single"] = run(tiny_config(name="single", **QUIET), store=str(root))
    return root, ids


def _replay(root, rid, **kw):
    with open_store(str(root), read_only=True) as st:
        return episode_replay(st, rid, **kw)


def _rows(root, rid):
    with open_store(str(root), read_only=True) as st:
        return st.rollouts(rid, limit=10_000).sort(["step", "stage", "prompt_id", "idx"]), st.allocations(rid)


@pytest.mark.parametrize("name", ["roc", "both"])
def test_roc_at_the_runs_own_factor_is_the_runs_decision_on_the_correct_side(runs, name):
    root, ids = runs
    out = _replay(root, ids[name])["roc"]
    rows, alloc = _rows(root, ids[name])
    assert out["oversample"] == out["logged_oversample"] == 2
    assert out["episodes_sampled"] == rows.height == 128 and out["episodes_kept"] == int(alloc["granted"].sum()) == 64
    assert out["correct_side_as_logged"] == 1.0
    got = out["decisions"].join(rows.select("step", "stage", "prompt_id", "idx", "correct", "filter_kept",
                                            "filter_penalty", "filter_reason"), on=["step", "stage", "prompt_id", "idx"])
    assert got.height == rows.height
    assert np.allclose(got["penalty"].to_numpy(), got["filter_penalty"].to_numpy(), atol=1e-6)
    right = got.filter(pl.col("correct"))
    assert right["kept"].to_list() == right["filter_kept"].to_list()
    assert right["reason"].to_list() == right["filter_reason"].to_list()
    per = got.group_by(["step", "prompt_id"]).agg(pl.col("kept").sum(), pl.col("filter_kept").sum())
    assert (per["kept"] == per["filter_kept"]).all()  # each grant kept, as many wrong ones as the run kept
    with open_store(str(root), read_only=True) as st:  # the spend: every sampled episode's model tokens
        eps = st.episodes(ids[name], [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows.to_dicts()])
    assert out["model_tokens_sampled"] == sum(e.model_tokens for e in eps.values())
    dropped = got.filter(~pl.col("kept"))
    assert out["model_tokens_dropped"] == sum(eps[(r["step"], r["stage"], r["prompt_id"], r["idx"])].model_tokens
                                              for r in dropped.to_dicts())


def test_roc_below_the_runs_factor_reads_the_first_episodes_of_each_group(runs):
    root, ids = runs
    out = _replay(root, ids["roc"], roc_oversample=1)["roc"]
    rows, alloc = _rows(root, ids["roc"])
    assert out["episodes_sampled"] == out["episodes_kept"] == int(alloc["granted"].sum()) == 64
    first = rows.group_by(["step", "stage", "prompt_id"], maintain_order=True).head(4)
    assert sorted(out["decisions"]["idx"].to_list()) == sorted(first["idx"].to_list())
    assert set(out["decisions"]["reason"]) == {"whole_group"} and out["correct_side_as_logged"] is None


@pytest.mark.parametrize("name, k, words", [
    ("uniform", 2, "sampled 1 episode(s) per granted one (rollout.episodes.roc_oversample = 1); the other 1 were "
                   "never sampled"),
    ("roc", 3, "the other 1 were never sampled"),
    ("both", 1, "below its own x2: its groups are ARPO trees"),
    ("single", 1, "it stored no episodes (single-turn rollouts)"),
])
def test_roc_refuses_what_was_never_sampled_in_one_line(runs, name, k, words):
    root, ids = runs
    if name == "both" and _rows(root, ids[name])[0]["parent_idx"].is_not_null().sum() == 0:
        pytest.skip("ARPO made no branch on this machine's draws (a branch needs a tool call)")
    out = _replay(root, ids[name], roc_oversample=k)["roc"]
    assert set(out) == {"refused"} and words in out["refused"] and "\n" not in out["refused"]
    assert out["refused"].startswith(f"RoC{'' if name == 'single' else f' x{k}'}: cannot replay run {ids[name]!r}")


def test_arpo_on_a_branched_run_counts_a_branchs_shared_prefix_once(runs):
    root, ids = runs
    out = _replay(root, ids["arpo"])["arpo"]
    rows, _ = _rows(root, ids["arpo"])
    if rows["parent_idx"].is_not_null().sum() == 0:
        pytest.skip("ARPO made no branch on this machine's draws (a branch needs a tool call)")
    with open_store(str(root), read_only=True) as st:
        eps = st.episodes(ids["arpo"], [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows.to_dicts()])
    shared = 0  # a plain loop over the stored episodes: a branch's assistant tokens before its branch point
    for r in rows.filter(pl.col("parent_idx").is_not_null()).to_dicts():
        pos = 0
        for turn in eps[(r["step"], r["stage"], r["prompt_id"], r["idx"])].response_turns:
            if pos + len(turn.token_ids) > r["branch_at"]:
                break
            pos += len(turn.token_ids)
            shared += len(turn.token_ids) if turn.role == "assistant" else 0
    trained = sum(e.model_tokens for e in eps.values())
    assert out["branches"] == rows["parent_idx"].is_not_null().sum() > 0 and out["episodes"] == 64
    assert out["model_tokens_shared"] == shared > 0
    assert out["model_tokens_trained"] == trained and out["model_tokens_sampled"] == trained - shared
    assert "draws that did not branch are not stored" in out["cannot"]


@pytest.mark.parametrize("name, words", [
    ("uniform", "tokens this run never sampled (rollout.episodes.arpo_branch was off)"),
    ("roc", "tokens this run never sampled (rollout.episodes.arpo_branch was off)"),
    ("single", "it stored no episodes (single-turn rollouts)"),
])
def test_arpo_refuses_branches_that_were_never_sampled_in_one_line(runs, name, words):
    root, ids = runs
    out = _replay(root, ids[name])["arpo"]
    assert set(out) == {"refused"} and words in out["refused"] and "\n" not in out["refused"]
    assert out["refused"].startswith(f"ARPO: cannot replay run {ids[name]!r}")


def test_the_command_prints_each_answer_or_its_refusal(runs):
    root, ids = runs
    runner = CliRunner()
    res = runner.invoke(app, ["replay", ids["roc"], "--episodes", "--store", str(root), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["roc"]["episodes_kept"] == 64 and len(out["roc"]["decisions"]) == 128
    assert "arpo_branch was off" in out["arpo"]["refused"]
    res = runner.invoke(app, ["replay", ids["uniform"], "--episodes", "--roc-oversample", "2", "--store", str(root)])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("RoC x2: cannot") and lines[1].startswith("ARPO: cannot")
    res = runner.invoke(app, ["replay", ids["uniform"], "--roc-oversample", "2", "--store", str(root)])
    assert res.exit_code == 1 and "--roc-oversample needs --episodes" in str(res.exception)
