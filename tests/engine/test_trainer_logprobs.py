"""The per-token log-probabilities the engine stores (`logging.token_logprobs`): the behaviour policy's
(`rollouts.token_logprobs`) and the trainer's in the update (`rollouts.token_trainer_logprobs`), on a
real pipelined organism run, and the rows' conversion on hand-made tensors."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import torch

from workbench.engine.steplog import Rollouts, rollouts_table


def _rollouts(trainer: torch.Tensor | None) -> Rollouts:
    n = 3
    return Rollouts(
        tokens=torch.tensor([[5, 6, 2], [7, 2, 0], [8, 9, 2]]), logprobs=torch.tensor(
            [[-0.1, -0.2, -0.3], [-0.4, -0.5, 0.0], [-0.6, -0.7, -0.8]]),
        entropy=torch.zeros(n, 3), lengths=torch.tensor([3, 2, 3]), finished=torch.ones(n, dtype=torch.bool),
        prompt=np.zeros(n, dtype=np.int64), stage=np.zeros(n, dtype=np.int64),
        policy_version=np.zeros(n, dtype=np.int64), temperature=np.ones(n), off_policy=np.zeros(n, dtype=bool),
        responses=["a", "b", "c"], rewards=np.zeros(n), verdicts=["wrong"] * n, trainer_logprobs=trainer)


def _table(r: Rollouts, **kw) -> pa.Table:
    n = r.n
    return rollouts_table("run", 1, r, prompt_ids=["p"], idx=np.arange(n), advantage=np.zeros(n),
                          used=np.ones(n, dtype=bool), **kw)


def test_rows_the_update_did_not_compute_store_null_and_the_switch_stores_nothing():
    nan = float("nan")
    trainer = torch.tensor([[-0.15, -0.2, -0.35], [nan, nan, nan], [-0.6, -0.75, -0.8]])
    t = _table(_rollouts(trainer), token_logprobs=True).to_pydict()
    assert [[round(x, 6) for x in row] for row in t["token_logprobs"]] == [[-0.1, -0.2, -0.3], [-0.4, -0.5],
                                                                         [-0.6, -0.7, -0.8]]
    assert t["token_trainer_logprobs"][1] is None
    assert [round(x, 6) for x in t["token_trainer_logprobs"][0]] == [-0.15, -0.2, -0.35]
    assert len(t["token_trainer_logprobs"][2]) == 3
    assert _table(_rollouts(None), token_logprobs=True).column("token_trainer_logprobs").null_count == 3
    off = _table(_rollouts(trainer))
    assert "token_logprobs" not in off.column_names and "token_trainer_logprobs" not in off.column_names


def test_a_pipelined_run_stores_both_and_their_gap_is_the_importance_weight(store_dir, tiny_config):
    """Every rollout keeps its behaviour log-probs (summing to logprob_sum); the rows the update computed
    keep the trainer's, whose gap to the behaviour's is ~0 where the rollout was fresh and gives back the
    stored mean importance weight (decoupled, per token, truncated at is_cap) everywhere."""
    from workbench.engine import run
    from workbench.store import open_store

    cfg = tiny_config(steps=4, eval__every=0, eval__at_start=False, pipeline__max_staleness=1,
                      logging__token_logprobs=True)
    rid = run(cfg, store=str(store_dir))
    with open_store(str(store_dir)) as st:
        rows = st.rollouts(rid, limit=10_000).to_dicts()
    assert rows and all(len(r["token_logprobs"]) == r["length"] for r in rows)
    assert all(math.isclose(sum(r["token_logprobs"]), r["logprob_sum"], abs_tol=1e-4) for r in rows)
    trained = [r for r in rows if r["token_trainer_logprobs"] is not None]
    assert trained and all(r["used_in_update"] for r in trained)
    cap = cfg.pipeline.is_cap
    for r in trained:
        gaps = [t - b for b, t in zip(r["token_logprobs"], r["token_trainer_logprobs"], strict=True)]
        if r["staleness"] == 0:
            assert max(abs(g) for g in gaps) < 1e-4, r
        weight = sum(min(math.exp(g), cap) for g in gaps) / len(gaps)
        assert math.isclose(weight, r["is_weight_mean"], rel_tol=1e-4, abs_tol=1e-4), r
