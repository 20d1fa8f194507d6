"""Advantage estimators for group-sampled RL with verifiable rewards.

Each estimator is a pure function `(rewards[N], group_index[N], **kw) -> (advantages[N], metrics)`:
rollouts that share a `group_index` value were sampled from the same prompt in the same step (all
stages pooled). Advantages are per sequence; the policy loss broadcasts them over tokens.

Every estimator gives exactly 0.0 to each rollout of a *zero-signal* group (all rewards equal, or a
single rollout), so those groups carry no policy gradient, and counts them in its metrics:

- `grpo`    — (r - group mean) / (group std + eps), std unbiased as in verl and TRL
              (Shao et al. 2024, DeepSeekMath). `std_scope="batch"` divides by the batch std
              instead (group mean, batch std: the "LitePPO" variant of Liu et al. 2025, "Tricks or Traps").
- `dr_grpo` — r - group mean, no std normalisation (Liu et al. 2025, "Understanding R1-Zero-Like
              Training"); pair it with the `seq-mean-token-sum-norm` loss aggregation.
- `rloo`    — r_i - mean of the other rollouts of its group (Ahmadian et al. 2024, "Back to Basics").

Metrics keys are namespaced `adv/...`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from workbench.registry import Registry


class AdvantageFn(Protocol):
    def __call__(
        self, rewards: torch.Tensor, group_index: torch.Tensor, **kw: float | str
    ) -> tuple[torch.Tensor, dict[str, float]]: ...


ADVANTAGE_ESTIMATORS: Registry[Callable] = Registry("advantage estimator")


def register_advantage(name: str) -> Callable[[Callable], Callable]:
    """Decorator: add an advantage estimator under `name` (duplicates are refused)."""
    return ADVANTAGE_ESTIMATORS.register(name)


def get_advantage(name: str) -> AdvantageFn:
    """The estimator registered as `name`; an unknown name raises ConfigError listing the valid ones."""
    return ADVANTAGE_ESTIMATORS.get(name)


def available_advantages() -> list[str]:
    """Names of the registered advantage estimators."""
    return ADVANTAGE_ESTIMATORS.names()


@dataclass
class GroupStats:
    """Per-rollout view of its group's statistics (float64, shape [N] each)."""

    mean: torch.Tensor
    std: torch.Tensor
    """Unbiased standard deviation (0 for groups of one)."""
    size: torch.Tensor
    total: torch.Tensor
    signal: torch.Tensor
    """True where the group's rewards are not all equal."""
    groups: int
    zero_signal_groups: int


def group_stats(rewards: torch.Tensor, group_index: torch.Tensor) -> GroupStats:
    """Group mean, std, size and the signal flag, gathered back to each rollout.

    `group_index` may hold any integer ids (not necessarily 0..G-1). Computed in float64 so that the
    zero-signal test is exact (max == min) rather than a tolerance on the std.
    """
    if rewards.ndim != 1 or group_index.shape != rewards.shape:
        raise ValueError(f"rewards and group_index must both have shape [N]; got {tuple(rewards.shape)} "
                         f"and {tuple(group_index.shape)}")
    r = rewards.detach().to(torch.float64)
    _, inv, counts = torch.unique(group_index, return_inverse=True, return_counts=True)
    g = counts.numel()
    total = torch.zeros(g, dtype=torch.float64, device=r.device).index_add_(0, inv, r)
    n = counts.to(torch.float64)
    mean = total / n
    sq = torch.zeros(g, dtype=torch.float64, device=r.device).index_add_(0, inv, (r - mean[inv]) ** 2)
    std = torch.where(counts > 1, (sq / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))
    rmax = torch.full((g,), -torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r, "amax")
    rmin = torch.full((g,), torch.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r, "amin")
    signal = rmax > rmin
    return GroupStats(mean=mean[inv], std=std[inv], size=n[inv], total=total[inv], signal=signal[inv],
                      groups=g, zero_signal_groups=int((~signal).sum()))


def group_has_signal(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """[N] bool: True for rollouts whose group's rewards are not all equal (the group carries gradient)."""
    return group_stats(rewards, group_index).signal


def _finish(adv: torch.Tensor, stats: GroupStats, like: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Zero the zero-signal groups exactly, cast back to the rewards' dtype, and measure."""
    adv = torch.where(stats.signal, adv, torch.zeros_like(adv)).to(like.dtype if like.is_floating_point()
                                                                    else torch.float32)
    n = adv.numel()
    metrics = {
        "adv/groups": float(stats.groups),
        "adv/zero_signal_groups": float(stats.zero_signal_groups),
        "adv/zero_signal_frac": stats.zero_signal_groups / stats.groups if stats.groups else 0.0,
        "adv/signal_rollouts": float(stats.signal.sum()),
        "adv/mean": float(adv.double().mean()) if n else 0.0,
        "adv/abs_mean": float(adv.double().abs().mean()) if n else 0.0,
        "adv/max": float(adv.max()) if n else 0.0,
        "adv/min": float(adv.min()) if n else 0.0,
    }
    return adv, metrics


@register_advantage("grpo")
def grpo_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6, std_scope: str = "group"
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO: centre on the group mean, scale by the group's (or, `std_scope="batch"`, the batch's) std."""
    stats = group_stats(rewards, group_index)
    centred = rewards.detach().to(torch.float64) - stats.mean
    if std_scope == "group":
        scale = stats.std
    elif std_scope == "batch":
        scale = rewards.detach().to(torch.float64).std() if rewards.numel() > 1 else torch.tensor(0.0)
    else:
        raise ValueError(f"std_scope must be 'group' or 'batch', got {std_scope!r}")
    return _finish(centred / (scale + eps), stats, rewards)


@register_advantage("dr_grpo")
def dr_grpo_advantage(rewards: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Dr. GRPO: centre on the group mean only (no std normalisation, which biases toward easy/hard prompts)."""
    stats = group_stats(rewards, group_index)
    return _finish(rewards.detach().to(torch.float64) - stats.mean, stats, rewards)


@register_advantage("rloo")
def rloo_advantage(rewards: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """RLOO: subtract the mean of the *other* rollouts of the group: r_i - (sum - r_i) / (n - 1)."""
    stats = group_stats(rewards, group_index)
    r = rewards.detach().to(torch.float64)
    baseline = (stats.total - r) / (stats.size - 1).clamp(min=1)
    return _finish(r - baseline, stats, rewards)
