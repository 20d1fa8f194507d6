"""AEPO's entropy-balanced policy optimisation (arXiv 2510.14545; docs/episode-allocation.md), the loss half:

1. `aepo_clip` (a registered policy loss, `algorithm.loss = "aepo_clip"`): PPO's clipped surrogate with the
   upper clip replaced by (1 + clip_high) * r / sg(r). Its value is PPO's clip value; its gradient is
   (1 + clip_high) * grad log pi instead of zero, so a token past the upper clip keeps learning (AEPO's
   "entropy-clipping balance": a high-entropy token the clip would silence stays in the gradient). As AEPO's
   code, it replaces the clamp for every token; the max with the unclipped term keeps PPO's choice, so only
   tokens with a positive advantage past 1 + clip_high change (their gradient), none changes its value. The
   lower clip is PPO's.
2. `entropy_scaled_advantages` (`algorithm.entropy_advantage`, AEPO's 0.2): each token's advantage times
   1 + coef * z(H_t), z the token's entropy standardised over the masked tokens of the batch (detached):
   "entropy-aware advantage estimation". The update applies it with the trainer's own entropies
   (`workbench/engine/update.py`), over each micro-batch (the batch the forward pass sees, as verl's actor).

Run it: `workbench run configs/organism-tools.toml --set algorithm.loss=aepo_clip --set
algorithm.entropy_advantage=0.2` (with `rollout.episodes.aepo_branch=true` for AEPO's rollout).
"""

from __future__ import annotations

import torch

from workbench.algorithms.losses import register_policy_loss, surrogate_loss


def entropy_scaled_advantages(advantages: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor,
                              coef: float) -> torch.Tensor:
    """[N, T] advantages (from [N] or [N, T]) times 1 + coef * (H - mean H) / std H, the mean and the
    (population) standard deviation over the tokens of `mask`; detached. A batch of one token, or of equal
    entropies, leaves the advantages unscaled (z = 0)."""
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages
    adv = adv.expand_as(entropy)
    h = entropy.detach().to(adv.dtype)
    m = mask.bool()
    n = int(m.sum())
    if n == 0 or coef == 0:
        return adv.clone()
    mean = h[m].mean()
    std = h[m].std(unbiased=False)
    z = torch.where(m, (h - mean) / std, torch.zeros_like(h)) if float(std) > 0 else torch.zeros_like(h)
    return adv * (1.0 + coef * z)


@register_policy_loss("aepo_clip")
def aepo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    aggregation: str,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_tokens: int | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate whose upper clip keeps its gradient (module docstring, point 1); the metrics
    of `ppo_clip`, `train/clip_frac_high` counting the tokens past the upper clip (their gradient is kept)."""
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0; got {clip_low}, {clip_high}")
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages
    adv = adv.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    high = 1.0 + clip_high
    kept = high * ratio / ratio.detach()  # value 1 + clip_high, gradient (1 + clip_high) * grad log pi
    capped = torch.where(ratio.detach() > high, kept, torch.clamp(ratio, min=1.0 - clip_low))
    per_token = torch.maximum(-adv * ratio, -adv * capped)
    return surrogate_loss(per_token, logprobs, old_logprobs, adv, mask, clip_low=clip_low, clip_high=clip_high,
                          aggregation=aggregation, ref_logprobs=ref_logprobs, kl_coef=kl_coef, max_tokens=max_tokens,
                          normalizer=normalizer, high_keeps_gradient=True)
