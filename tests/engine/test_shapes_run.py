"""Rollout shapes in the training loop (issue #32): a tiny organism run with each shape trains and
records each rollout's shape; a speculative run resumed from a checkpoint (its drafts in it) equals
the uninterrupted one; the asynchronous pipeline is refused at load."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.config import RunConfig, config_warnings
from workbench.engine import resume, run
from workbench.engine.checkpoint import checkpoint_dir
from workbench.errors import ConfigError
from workbench.metrics import CATALOGUE, lookup
from workbench.store import open_store

COLS = ["step", "prompt_id", "idx", "response", "reward", "shape", "draft_mode", "reused_tokens", "draft_tokens",
        "draft_rejected_at", "parent_idx", "branch_at"]


def _catalogued(seen: dict, present: str) -> None:
    """Every metric the run recorded is in the catalogue, and so is every one of its shape's entries."""
    names = set().union(*(m.keys() for m in seen.values()))
    assert sorted(n for n in names if lookup(n) is None) == []
    assert sorted(m.name for m in CATALOGUE if m.present == present and m.name not in names) == []


def _rows(store_dir, rid):
    with open_store(str(store_dir)) as st:
        return st.rollouts(rid, limit=100_000).select(COLS).sort(["step", "prompt_id", "idx"])


def test_a_speculative_run_reuses_drafts_records_them_and_resumes_exactly(store_dir, tiny_config):
    # 8 training prompts, 8 a step: every prompt comes back each step, so drafts serve from step 2 on
    cfg = tiny_config(steps=3, eval__every=0, task__train_size=8, rollout__shape="speculative")
    seen = {}
    a = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows = _rows(store_dir, a)
    assert set(rows["shape"].to_list()) == {"speculative"}
    first, later = rows.filter(rows["step"] == 1), rows.filter(rows["step"] > 1)
    assert first["draft_tokens"].null_count() == first.height  # nothing to draft from yet
    assert later["draft_tokens"].null_count() == 0
    assert first["draft_mode"].null_count() == first.height and set(later["draft_mode"]) == {"exact"}
    assert (later["reused_tokens"] <= later["draft_tokens"]).all()
    rejected = later.filter(later["draft_rejected_at"].is_not_null())
    assert (rejected["draft_rejected_at"] == rejected["reused_tokens"]).all()
    assert seen[3]["rollout/shape/draft_rows"] == 32 and 0 < seen[3]["rollout/shape/accept_rate"] <= 1
    assert any(seen[s]["train/optimizer_steps"] for s in (1, 2, 3))  # it trains (a step may skip: no signal)
    assert all(("train/loss" in seen[s]) == (seen[s]["train/optimizer_steps"] > 0) for s in (1, 2, 3))
    _catalogued(seen, "speculative")
    b = run(cfg, store=str(store_dir), stop_after=2)
    resume(str(store_dir), b)
    assert (checkpoint_dir(store_dir, b) / "step-000002.pt").exists()
    assert _rows(store_dir, b).drop("idx").to_dicts() == rows.drop("idx").to_dicts()


def test_a_lenient_run_stores_its_rows_as_lenient_and_warns_of_nothing(store_dir, tiny_config):
    cfg = tiny_config(steps=2, eval__every=0, eval__at_start=False, checkpoint__every=0, task__train_size=8,
                      rollout__shape="speculative", rollout__speculative={"mode": "lenient"})
    rid = run(cfg, store=str(store_dir))
    rows = _rows(store_dir, rid)
    assert rows.filter(rows["step"] == 1)["draft_mode"].null_count() == 32  # no drafts yet
    assert rows.filter(rows["step"] == 2)["draft_mode"].to_list() == ["lenient"] * 32
    with open_store(str(store_dir)) as st:
        assert st.events(rid).filter(pl.col("kind") == "config").is_empty()


def test_exact_speculative_rollouts_warn_with_an_allocator_that_reads_earlier_rewards(store_dir, tiny_config):
    cfg = tiny_config(steps=1, eval__every=0, eval__at_start=False, checkpoint__every=0,
                      rollout__shape="speculative", allocator__name="selective")
    assert config_warnings(tiny_config(rollout__shape="speculative")) == []  # uniform: this step's results only
    assert config_warnings(tiny_config(allocator__name="selective")) == []  # independent rows
    with pytest.warns(UserWarning, match="allocator 'selective': the allocator reads a prompt's earlier rewards"):
        rid = run(cfg, store=str(store_dir))
    with open_store(str(store_dir)) as st:
        (said,) = st.events(rid).filter(pl.col("kind") == "config")["message"].to_list()
    assert "not exactly the current policy's samples" in said


def test_a_tree_run_records_parents_and_branch_points(store_dir, tiny_config):
    cfg = tiny_config(steps=2, eval__every=0, rollout__shape="tree",
                      rollout__tree={"tau_abs": 0.05, "tau_rel": 0.9})
    seen = {}
    rid = run(cfg, store=str(store_dir), on_step=lambda s, m: seen.__setitem__(s, m))
    rows = _rows(store_dir, rid)
    assert set(rows["shape"].to_list()) == {"tree"}
    branched = rows.filter(rows["parent_idx"].is_not_null())
    assert branched.height > 0 and (branched["parent_idx"] < branched["idx"]).all()
    assert (branched["branch_at"] >= 0).all()
    assert seen[1]["rollout/shape/branches"] == branched.filter(branched["step"] == 1).height
    assert seen[1]["rollout/shape/eta"] == 1.0
    _catalogued(seen, "tree")


@pytest.mark.parametrize("rollout", [{"backend": "vllm"}, {"backend": "ray", "workers": 2}])
@pytest.mark.parametrize("shape", ["speculative", "tree"])
def test_shapes_on_backends_that_cannot_run_them_are_refused_at_load(rollout, shape):
    with pytest.raises(ConfigError, match=f"^rollout.shape = '{shape}' runs on rollout.backend = \"hf\" only, "
                                          f"not '{rollout['backend']}' yet"):
        RunConfig.from_dict({"rollout": {**rollout, "shape": shape}})
    assert RunConfig.from_dict({"rollout": rollout}).rollout.shape == "independent"  # the backend itself loads


def test_shapes_refuse_the_asynchronous_pipeline_at_load():
    with pytest.raises(ConfigError, match="rollout.shape = 'tree' runs in the synchronous loop only"):
        RunConfig.from_dict({"rollout": {"shape": "tree"}, "pipeline": {"max_staleness": 1}})
    with pytest.raises(ConfigError, match="rollout.speculative.spec_bias"):
        RunConfig.from_dict({"rollout": {"shape": "speculative", "speculative": {"spec_bias": -1}}})
    with pytest.raises(ConfigError, match="rollout.tree.eta_steps"):
        RunConfig.from_dict({"rollout": {"tree": {"eta_steps": [5, 10], "eta_values": [1, 0.5]}}})
    with pytest.raises(ConfigError, match="rollout.shape"):
        RunConfig.from_dict({"rollout": {"shape": "forest"}})
