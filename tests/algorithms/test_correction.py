"""The off-policy correction against a case worked by hand: weights, anchors and the clipped loss,
for bypass and decoupled, per token and per sequence."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.algorithms.correction import correct
from workbench.algorithms.losses import ppo_clip_loss

# one stale row of two tokens, one fresh row; pi_prox / pi_behav = 2 and 0.5 on the stale row
PROX = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.3]]))
BEHAV = torch.log(torch.tensor([[0.25, 0.8], [0.1, 0.9]]))
LOGP = torch.log(torch.tensor([[0.6, 0.4], [0.3, 0.3]]))  # the policy being updated
ADV = torch.tensor([1.0, 1.0])
MASK = torch.ones(2, 2)
STALE = torch.tensor([True, False])


def _loss(anchor, adv_tok):
    loss, _ = ppo_clip_loss(LOGP, anchor, adv_tok, MASK, clip_low=0.2, clip_high=0.28, aggregation="token")
    return float(loss)


@pytest.mark.parametrize("level, cap, weights, truncated", [
    ("token", 2.0, [2.0, 0.5], 0.0),
    ("token", 1.5, [1.5, 0.5], 0.5),
    ("sequence", 2.0, [1.0, 1.0], 0.0),  # 2 x 0.5 = 1
])
def test_decoupled(level, cap, weights, truncated):
    anchor, adv_tok, m, row_w = correct(PROX, BEHAV, ADV, MASK, STALE, mode="decoupled", level=level, cap=cap)
    assert torch.equal(anchor, PROX)  # the ratio is taken against the proximal policy
    assert adv_tok[0].tolist() == pytest.approx(weights)
    assert adv_tok[1].tolist() == [1.0, 1.0]  # a fresh row: weight 1
    assert m["train/is_truncated_frac"] == pytest.approx(truncated)
    assert m["train/is_weight_mean"] == pytest.approx(sum(weights) / 2)
    assert row_w.tolist() == pytest.approx([sum(weights) / 2, 1.0])
    # ratios to prox: 1.2 and 1.0 (inside the clip) on the stale row, 1 on the fresh one
    expect = (-weights[0] * 1.2 - weights[1] * 1.0 - 1.0 - 1.0) / 4
    assert _loss(anchor, adv_tok) == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_bypass(level):
    anchor, adv_tok, m, _ = correct(PROX, BEHAV, ADV, MASK, STALE, mode="bypass", level=level, cap=2.0)
    assert torch.equal(anchor[0], BEHAV[0]) and torch.equal(anchor[1], PROX[1])
    assert adv_tok.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    # ratios to the behaviour policy: 2.4 (clipped to 1.28, A > 0) and 0.5 (the unclipped term binds)
    assert _loss(anchor, adv_tok) == pytest.approx((-1.28 - 0.5 - 1.0 - 1.0) / 4, rel=1e-6)
    assert m["train/is_weight_mean"] == 1.0


def test_diagnostics_by_hand():
    _, _, m, _ = correct(PROX, BEHAV, ADV, MASK, STALE, mode="decoupled", level="token", cap=2.0)
    # k3 of r = pi_prox / pi_behav over the stale tokens: r - 1 - log r for r = 2 and 0.5
    k3 = [(r - 1 - math.log(r)) for r in (2.0, 0.5)]
    assert m["train/kl_behav_k3"] == pytest.approx(sum(k3) / 2, rel=1e-6)
    assert m["train/ess_frac"] == pytest.approx(2.5 ** 2 / (2 * (4 + 0.25)), rel=1e-6)
    assert m["train/is_weight_max"] == pytest.approx(2.0)


def test_no_stale_row_is_the_synchronous_loss():
    fresh = torch.tensor([False, False])
    for mode in ("bypass", "decoupled", "none"):
        anchor, adv_tok, m, _ = correct(PROX, BEHAV, ADV, MASK, fresh, mode=mode)
        assert torch.equal(anchor, PROX) and adv_tok.tolist() == [[1.0, 1.0], [1.0, 1.0]]
        assert m["train/stale_tokens"] == 0.0
