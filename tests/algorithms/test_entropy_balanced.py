"""AEPO's entropy-balanced optimisation (`workbench.algorithms.entropy_balanced`) against hand-computed cases: the
clip's value is PPO's and its gradient is kept past the upper clip; the entropy-scaled advantage; and the update
takes per-token advantages ([rows, tokens]) equal to per-row ones when they are constant along a row."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.algorithms import entropy_scaled_advantages, get_policy_loss
from workbench.algorithms.correction import correct

KW = dict(clip_low=0.2, clip_high=0.28, aggregation="token")


def _ratio_loss(name: str, ratio: float, adv: float) -> tuple[float, float]:
    """The loss of one token whose ratio is `ratio`, and its gradient with respect to the log-prob."""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros((1, 1), dtype=torch.float64)
    loss, _ = get_policy_loss(name)(logp, old, torch.tensor([adv], dtype=torch.float64), torch.ones((1, 1)), **KW)
    loss.backward()
    return float(loss.detach()), float(logp.grad)


@pytest.mark.parametrize("ratio, adv, value, grad_ppo, grad_aepo", [
    # past the upper clip, positive advantage: PPO's value -1.28 * A, gradient 0; AEPO: same value, gradient
    # -(1 + 0.28) * A (d/dlogp of 1.28 * r / sg(r) is 1.28)
    (1.5, 2.0, -2.56, 0.0, -2.56),
    (2.0, 1.0, -1.28, 0.0, -1.28),
    # inside the clip: both are -A * r, gradient -A * r
    (1.1, 2.0, -2.2, -2.2, -2.2),
    # past the upper clip, negative advantage: the unclipped term wins in both: -A * r, gradient -A * r
    (1.5, -1.0, 1.5, 1.5, 1.5),
    # below the lower clip, negative advantage: PPO's lower clip in both: value -A * 0.8, gradient 0
    (0.5, -1.0, 0.8, 0.0, 0.0),
    # below the lower clip, positive advantage: unclipped: -A * r
    (0.5, 1.0, -0.5, -0.5, -0.5),
])
def test_the_clip_has_ppo_value_and_keeps_the_gradient_past_the_upper_clip(ratio, adv, value, grad_ppo, grad_aepo):
    v_ppo, g_ppo = _ratio_loss("ppo_clip", ratio, adv)
    v_aepo, g_aepo = _ratio_loss("aepo_clip", ratio, adv)
    assert v_ppo == pytest.approx(value) and v_aepo == pytest.approx(value)
    assert g_ppo == pytest.approx(grad_ppo, abs=1e-12) and g_aepo == pytest.approx(grad_aepo)


def test_the_clip_metrics_count_what_it_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5]]))
    _, m = get_policy_loss("aepo_clip")(logp, torch.zeros_like(logp), torch.tensor([1.0]), torch.ones_like(logp), **KW)
    assert m["train/clip_frac_high"] == pytest.approx(1 / 3) and m["train/clip_frac"] == 0.0
    assert m["train/tokens"] == 3.0


def test_entropy_scaled_advantages_by_hand():
    # masked tokens' entropies 1, 2, 3 (the 4th masked out): mean 2, population std sqrt(2/3)
    ent = torch.tensor([[1.0, 2.0], [3.0, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    out = entropy_scaled_advantages(torch.tensor([2.0, -1.0]), ent, mask, 0.2)
    s = math.sqrt(2 / 3)
    want = [[2 * (1 + 0.2 * (-1 / s)), 2.0], [-1 * (1 + 0.2 * (1 / s)), -1.0]]
    assert out.flatten().tolist() == pytest.approx([x for row in want for x in row])
    # per-token advantages in: each scaled by its own token
    tok = torch.tensor([[1.0, 0.5], [2.0, 2.0]])
    out2 = entropy_scaled_advantages(tok, ent, mask, 0.2)
    assert out2[0, 1] == pytest.approx(0.5) and out2[1, 0] == pytest.approx(2 * (1 + 0.2 / s))
    # equal entropies or coef 0: unscaled; no gradient through the entropies
    assert entropy_scaled_advantages(torch.tensor([2.0]), torch.ones((1, 3)), torch.ones((1, 3)), 0.2).tolist() == \
        [[2.0, 2.0, 2.0]]
    assert entropy_scaled_advantages(torch.tensor([2.0, -1.0]), ent, mask, 0.0).tolist() == [[2.0, 2.0], [-1.0, -1.0]]
    e = ent.clone().requires_grad_(True)
    assert not entropy_scaled_advantages(torch.tensor([2.0, -1.0]), e, mask, 0.2).requires_grad


@pytest.mark.parametrize("name", ["ppo_clip", "aepo_clip"])
@pytest.mark.parametrize("aggregation", ["token", "sequence", "seq-mean-token-sum-norm"])
def test_per_token_advantages_constant_along_a_row_are_the_per_row_loss(name, aggregation):
    g = torch.Generator().manual_seed(0)
    logp = (torch.randn((3, 5), generator=g) * 0.3).requires_grad_(True)
    old = logp.detach() + torch.randn((3, 5), generator=g) * 0.3
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    adv = torch.tensor([1.0, -0.5, 2.0])
    kw = dict(KW, aggregation=aggregation)
    a, _ = get_policy_loss(name)(logp, old, adv, mask, **kw)
    (ga,) = torch.autograd.grad(a, logp)
    b, _ = get_policy_loss(name)(logp, old, adv.unsqueeze(1).expand(3, 5).clone(), mask, **kw)
    (gb,) = torch.autograd.grad(b, logp)
    assert float(a) == float(b) and torch.equal(ga, gb)


def test_the_correction_takes_per_token_advantages():
    prox = torch.zeros((2, 3))
    behav = torch.log(torch.tensor([[0.5, 1.0, 1.0], [1.0, 1.0, 1.0]]))
    mask = torch.ones((2, 3))
    stale = torch.tensor([True, False])
    _, row, _, _ = correct(prox, behav, torch.tensor([1.0, 2.0]), mask, stale, mode="decoupled", cap=2.0)
    _, tok, _, _ = correct(prox, behav, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]), mask, stale,
                           mode="decoupled", cap=2.0)
    assert torch.equal(row, tok) and row[0, 0] == pytest.approx(2.0)  # the weight 1 / 0.5, per token
