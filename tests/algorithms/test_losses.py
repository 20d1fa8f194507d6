"""The clipped policy loss against a plain-loop reference; clip boundaries; zero-signal gradients."""

import math

import pytest
import torch

from workbench.algorithms import aggregate, available_policy_losses, get_advantage, get_policy_loss
from workbench.algorithms import register_policy_loss
from workbench.errors import ConfigError
from f32 import f32_atol

ppo = get_policy_loss("ppo_clip")


def _fixed(seed=0, n=6, t=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g) * 2
    logp = old + (torch.rand(n, t, generator=g) - 0.5) * 0.8  # ratios roughly in [0.67, 1.5]
    ref = old + (torch.rand(n, t, generator=g) - 0.5) * 0.4
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, 0.0])[:n]
    lengths = [5, 3, 1, 4, 0, 2][:n]
    mask = torch.tensor([[1.0 if j < lengths[i] else 0.0 for j in range(t)] for i in range(n)])
    return logp, old, ref, adv, mask


def ref_loss(logp, old, ref, adv, mask, cl, ch, agg, kl_coef, max_tokens=None):
    """Plain-Python PPO-clip + k3 KL with the three aggregations."""
    n, t = mask.shape
    per = [[0.0] * t for _ in range(n)]
    for i in range(n):
        for j in range(t):
            r = math.exp(logp[i, j].item() - old[i, j].item())
            a = adv[i].item()
            v = max(-a * r, -a * min(max(r, 1 - cl), 1 + ch))
            d = ref[i, j].item() - logp[i, j].item()
            per[i][j] = v + kl_coef * (math.exp(d) - d - 1)
    m = mask.tolist()
    if agg == "token":
        return sum(per[i][j] * m[i][j] for i in range(n) for j in range(t)) / sum(map(sum, m))
    if agg == "sequence":
        seqs = [sum(per[i][j] * m[i][j] for j in range(t)) / sum(m[i]) for i in range(n) if sum(m[i]) > 0]
        return sum(seqs) / len(seqs)
    return sum(per[i][j] * m[i][j] for i in range(n) for j in range(t)) / (n * (max_tokens or t))


@pytest.mark.parametrize("agg,name", [("token", "token"), ("token-mean", "token"), ("sequence", "sequence"),
                                      ("seq-mean-token-mean", "sequence"),
                                      ("seq-mean-token-sum-norm", "sum_norm")])
@pytest.mark.parametrize("cl,ch,kl_coef", [(0.2, 0.2, 0.0), (0.2, 0.28, 0.0), (0.1, 0.3, 0.05)])
def test_matches_loop_reference(agg, name, cl, ch, kl_coef):
    logp, old, ref, adv, mask = _fixed()
    kw = {"max_tokens": 16} if name == "sum_norm" else {}
    loss, metrics = ppo(logp, old, adv, mask, clip_low=cl, clip_high=ch, aggregation=agg,
                        ref_logprobs=ref, kl_coef=kl_coef, **kw)
    want = ref_loss(logp, old, ref, adv, mask, cl, ch, name, kl_coef, kw.get("max_tokens"))
    # float32 tensor ops vs a Python-float loop over the 15 tokens
    assert loss.item() == pytest.approx(want, abs=f32_atol(max(abs(want), 1.0), 64))
    assert metrics["train/tokens"] == 15
    assert metrics["train/kl"] > 0


def test_clip_fraction_matches_loop():
    logp, old, _, adv, mask = _fixed(seed=3)
    _, m = ppo(logp, old, adv, mask, clip_low=0.1, clip_high=0.15, aggregation="token")
    low = high = tokens = 0
    for i in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            if mask[i, j] == 0:
                continue
            tokens += 1
            r = math.exp(logp[i, j].item() - old[i, j].item())
            low += r < 0.9 and adv[i] < 0
            high += r > 1.15 and adv[i] > 0
    assert low + high > 0
    assert m["train/clip_frac_low"] == pytest.approx(low / tokens)
    assert m["train/clip_frac_high"] == pytest.approx(high / tokens)
    assert m["train/clip_frac"] == pytest.approx((low + high) / tokens)


def _grad_at_ratio(ratio, adv, cl=0.2, ch=0.28):
    old = torch.zeros(1, 1, dtype=torch.float64)
    logp = torch.full((1, 1), math.log(ratio), dtype=torch.float64, requires_grad=True)
    loss, m = ppo(logp, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 1), clip_low=cl,
                  clip_high=ch, aggregation="token")
    loss.backward()
    return logp.grad.item(), m["train/clip_frac"]


def test_clip_boundaries():
    # Positive advantage: gradient up to and at 1 + clip_high, none above it; never clipped below.
    assert _grad_at_ratio(1.28, 1.0)[0] == pytest.approx(-1.28)
    assert _grad_at_ratio(1.2800001, 1.0) == (0.0, 1.0)
    assert _grad_at_ratio(0.5, 1.0)[0] == pytest.approx(-0.5)
    # Negative advantage: gradient down to and at 1 - clip_low, none below it; never clipped above.
    assert _grad_at_ratio(0.8, -1.0)[0] == pytest.approx(0.8)
    assert _grad_at_ratio(0.7999999, -1.0) == (0.0, 1.0)
    assert _grad_at_ratio(3.0, -1.0)[0] == pytest.approx(3.0)
    # Clip-higher: a ratio of 1.25 is clipped by the symmetric 0.2 clip but not by clip_high 0.28.
    assert _grad_at_ratio(1.25, 1.0, cl=0.2, ch=0.2) == (0.0, 1.0)
    assert _grad_at_ratio(1.25, 1.0, cl=0.2, ch=0.28)[1] == 0.0


def test_zero_signal_groups_give_zero_gradient():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.2, 0.2, 0.2])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(12, 4, generator=g)
    for name in ["grpo", "dr_grpo", "rloo"]:
        adv, _ = get_advantage(name)(rewards, groups)
        for agg in ["token", "sequence", "seq-mean-token-sum-norm"]:
            logp = (old + 0.3 * torch.randn(12, 4, generator=g)).requires_grad_(True)
            loss, _ = ppo(logp, old, adv, torch.ones(12, 4), clip_low=0.2, clip_high=0.2, aggregation=agg)
            loss.backward()
            assert (logp.grad[4:] == 0).all(), (name, agg)
            assert (logp.grad[:4] != 0).any(), (name, agg)


def test_on_policy_gradient_is_policy_gradient():
    """At ratio 1 the token-mean gradient of each token is -A / tokens (the REINFORCE form)."""
    old = torch.randn(3, 4)
    logp = old.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, m = ppo(logp, old, adv, torch.ones(3, 4), clip_low=0.2, clip_high=0.2, aggregation="token")
    loss.backward()
    assert torch.allclose(logp.grad, -adv.unsqueeze(1).expand(3, 4) / 12)
    assert m["train/ratio_mean"] == pytest.approx(1.0) and m["train/clip_frac"] == 0.0
    assert m["train/approx_kl_old"] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("agg,norm", [("token", lambda m: m.sum()), ("sequence", lambda m: (m.sum(1) > 0).sum()),
                                      ("seq-mean-token-sum-norm", lambda m: m.shape[0] * 8)])
def test_normalizer_makes_micro_batches_exact(agg, norm):
    logp, old, _, adv, mask = _fixed(seed=5)
    full, _ = ppo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation=agg, max_tokens=8)
    denom = float(norm(mask))
    parts = [ppo(logp[s], old[s], adv[s], mask[s], clip_low=0.2, clip_high=0.2, aggregation=agg, max_tokens=8,
                 normalizer=denom)[0] for s in (slice(0, 2), slice(2, 6))]
    # two partial float32 sums vs one sum over the same terms
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), abs=f32_atol(max(abs(full.item()), 1.0), 64))


@pytest.mark.parametrize("agg,norm", [("token-mean", lambda m: m.sum()), ("sequence", lambda m: (m.sum(1) > 0).sum()),
                                      ("seq-mean-token-sum-norm", lambda m: m.shape[0] * 8)])
def test_loss_normaliser_is_the_aggregations_denominator(agg, norm):
    """The engine's mini-batch denominator is the one `aggregate` divides by when given none."""
    from workbench.algorithms.losses import loss_normaliser

    logp, old, _, adv, mask = _fixed(seed=5)
    assert loss_normaliser(mask, agg, max_tokens=8) == float(norm(mask))
    given = ppo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation=agg, max_tokens=8,
                normalizer=loss_normaliser(mask, agg, max_tokens=8))[0]
    default = ppo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation=agg, max_tokens=8)[0]
    assert given.item() == default.item()
    assert loss_normaliser(mask[:0], agg, max_tokens=8) == 1.0


def test_per_token_advantages_accepted():
    logp, old, _, adv, mask = _fixed()
    a, _ = ppo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation="token")
    b, _ = ppo(logp, old, adv.unsqueeze(1).expand_as(mask), mask, clip_low=0.2, clip_high=0.2, aggregation="token")
    assert a.item() == pytest.approx(b.item())


def test_registry_and_aggregation_errors():
    assert sorted(available_policy_losses()) == ["aepo_clip", "ppo_clip"]
    with pytest.raises(ConfigError, match="valid names: .*ppo_clip"):
        get_policy_loss("grpo_loss")
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("ppo_clip")(ppo)
    logp, old, _, adv, mask = _fixed()
    with pytest.raises(ConfigError, match="seq-mean-token-sum-norm"):
        ppo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, aggregation="mean")
    with pytest.raises(ValueError, match="clip_low"):
        ppo(logp, old, adv, mask, clip_low=-0.1, clip_high=0.2, aggregation="token")


def test_aggregate_empty_mask_is_zero():
    v = torch.ones(2, 3)
    for agg in ["token", "sequence", "seq-mean-token-sum-norm"]:
        assert aggregate(v, torch.zeros(2, 3), agg).item() == 0.0
