"""Policy losses: the PPO-style clipped-ratio objective and its token aggregations.

A policy loss is a pure function

    loss_fn(logprobs, old_logprobs, advantages, mask, *, clip_low, clip_high, aggregation,
            ref_logprobs=None, kl_coef=0.0, **kw) -> (loss, metrics)

over [N, T] per-token log-probabilities of the sampled response tokens (`mask` [N, T] is 1 on real
tokens), with `advantages` per sequence [N] or per token [N, T]. Metrics keys are namespaced `train/...`.

`ppo_clip` departs from the textbook PPO loss in two ways the GRPO family uses:
1. Separate clip bounds: the ratio is clipped to [1 - clip_low, 1 + clip_high]. clip_low == clip_high is
   the symmetric PPO clip; clip_high > clip_low is DAPO's "clip-higher" (Yu et al. 2025), which lets
   low-probability tokens with positive advantage grow and so slows entropy collapse.
2. An optional KL penalty to a frozen reference policy, added per token with the k3 estimator
   exp(ref - logp) - (ref - logp) - 1 (Schulman 2020, as in GRPO), weighted by `kl_coef`.

Aggregations (how per-token losses become one scalar; names from verl, short aliases accepted):
- `token` / `token-mean`: sum over every token / number of tokens (DAPO's token-level loss: long
  responses weigh in proportion to their length).
- `sequence` / `seq-mean-token-mean`: mean over tokens within a sequence, then mean over sequences
  (the original GRPO loss).
- `seq-mean-token-sum-norm`: sum over all tokens / (number of sequences x a constant `max_tokens`), the
  Dr. GRPO loss without length normalisation. Pass `max_tokens=max_new_tokens`; without it the padded
  width T of the batch is used, which is constant only if every batch is padded to max_new_tokens.

Gradient accumulation: a loss over a micro-batch is only exact for the full batch when every
micro-batch divides by the same denominator. Pass `normalizer=` the full batch's denominator (tokens
for `token`, sequences for `sequence`, sequences x max_tokens for `seq-mean-token-sum-norm`) and sum
the micro-batch losses; without it each micro-batch divides by its own count.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from workbench.registry import Registry

POLICY_LOSSES: Registry[Callable] = Registry("policy loss")

AGGREGATIONS = {
    "token": "token",
    "token-mean": "token",
    "sequence": "sequence",
    "seq-mean-token-mean": "sequence",
    "seq-mean-token-sum-norm": "token_sum_norm",
}
"""Accepted aggregation names -> the canonical mode."""


class PolicyLossFn(Protocol):
    def __call__(
        self,
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
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: add a policy loss under `name` (duplicates are refused)."""
    return POLICY_LOSSES.register(name)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The loss registered as `name`; an unknown name raises ConfigError listing the valid ones."""
    return POLICY_LOSSES.get(name)


def available_policy_losses() -> list[str]:
    """Names of the registered policy losses."""
    return POLICY_LOSSES.names()


def canonical_aggregation(aggregation: str) -> str:
    """Map an accepted aggregation name to its mode; unknown names raise ConfigError listing the valid ones."""
    from workbench.errors import ConfigError

    try:
        return AGGREGATIONS[aggregation]
    except KeyError:
        raise ConfigError(
            f"unknown loss aggregation {aggregation!r}; valid names: {', '.join(AGGREGATIONS)}"
        ) from None


def loss_normaliser(mask: torch.Tensor, aggregation: str, max_tokens: int | None = None) -> float:
    """The denominator of `aggregation` over the rows of `mask` [N, T] (at least 1): tokens for `token`,
    non-empty sequences for `sequence`, N x `max_tokens` (default: the width T) for
    `seq-mean-token-sum-norm`. Micro-batches of one mini-batch pass this as `normalizer=`."""
    mode = canonical_aggregation(aggregation)
    if mode == "token":
        return max(float(mask.sum()), 1.0)
    if mode == "sequence":
        return max(float((mask.sum(-1) > 0).sum()), 1.0)
    width = max_tokens if max_tokens is not None else mask.shape[-1]
    return max(float(mask.shape[0] * width), 1.0)


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    aggregation: str,
    *,
    max_tokens: int | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce per-token `values` [N, T] under `mask` to a scalar with one of the AGGREGATIONS."""
    mode = canonical_aggregation(aggregation)
    m = mask.to(values.dtype)
    denom = normalizer if normalizer is not None else loss_normaliser(mask, aggregation, max_tokens)
    if mode == "sequence":
        lengths = m.sum(dim=-1)
        per_seq = (values * m).sum(dim=-1) / lengths.clamp(min=1.0)
        nonempty = (lengths > 0).to(values.dtype)
        return (per_seq * nonempty).sum() / denom
    return (values * m).sum() / denom


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    m = mask.to(x.dtype)
    return float((x * m).sum() / m.sum().clamp(min=1.0))


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
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
    """PPO clipped surrogate with bounds [1 - clip_low, 1 + clip_high], plus an optional k3 KL penalty.

    Per token: max(-A * ratio, -A * clip(ratio)) + kl_coef * k3(logp, ref); then aggregated. The
    gradient flows through `logprobs` only. Metrics: `train/pg_loss`, `train/kl` (0 without a
    reference), `train/clip_frac` (share of tokens whose gradient the clip removed), split into
    `train/clip_frac_low` / `train/clip_frac_high`, ratio mean/min/max, `train/approx_kl_old` (k3
    of the current policy against the sampling policy) and `train/tokens`.
    """
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0; got {clip_low}, {clip_high}")
    adv = advantages.unsqueeze(-1) if advantages.ndim == 1 else advantages
    adv = adv.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(-adv * ratio, clipped)
    return surrogate_loss(per_token, logprobs, old_logprobs, adv, mask, clip_low=clip_low, clip_high=clip_high,
                          aggregation=aggregation, ref_logprobs=ref_logprobs, kl_coef=kl_coef, max_tokens=max_tokens,
                          normalizer=normalizer)


def surrogate_loss(per_token: torch.Tensor, logprobs: torch.Tensor, old_logprobs: torch.Tensor, adv: torch.Tensor,
                   mask: torch.Tensor, *, clip_low: float, clip_high: float, aggregation: str,
                   ref_logprobs: torch.Tensor | None, kl_coef: float, max_tokens: int | None,
                   normalizer: float | None,
                   high_keeps_gradient: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """A clipped surrogate's per-token loss aggregated, plus the optional k3 KL penalty, and the metrics every
    clipped loss reports (`ppo_clip`'s docstring). With `high_keeps_gradient` (AEPO's clip) the tokens past the
    upper clip keep their gradient: they count in `train/clip_frac_high`, not in `train/clip_frac`."""
    maskb = mask.bool()
    pg_loss = aggregate(per_token, mask, aggregation, max_tokens=max_tokens, normalizer=normalizer)
    loss = pg_loss
    kl_value = 0.0
    if ref_logprobs is not None:
        kl = kl_k3(logprobs, ref_logprobs.detach())
        kl_value = _masked_mean(kl.detach(), mask)
        if kl_coef:
            loss = loss + kl_coef * aggregate(kl, mask, aggregation, max_tokens=max_tokens, normalizer=normalizer)
    with torch.no_grad():
        r = torch.exp(logprobs.detach() - old_logprobs.detach())
        a = adv.expand_as(r)
        low = (r < 1.0 - clip_low) & (a < 0) & maskb
        high = (r > 1.0 + clip_high) & (a > 0) & maskb
        tokens = int(maskb.sum())
        removed = low if high_keeps_gradient else low | high
        metrics = {
            "train/pg_loss": float(pg_loss.detach()),
            "train/kl": kl_value,
            "train/clip_frac": float(removed.sum()) / max(tokens, 1),
            "train/clip_frac_low": float(low.sum()) / max(tokens, 1),
            "train/clip_frac_high": float(high.sum()) / max(tokens, 1),
            "train/ratio_mean": _masked_mean(r, mask),
            "train/ratio_min": float(r[maskb].min()) if tokens else 1.0,
            "train/ratio_max": float(r[maskb].max()) if tokens else 1.0,
            "train/approx_kl_old": _masked_mean(kl_k3(logprobs.detach(), old_logprobs.detach()), mask),
            "train/tokens": float(tokens),
        }
    return loss, metrics
