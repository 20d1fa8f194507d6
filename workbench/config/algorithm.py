"""`[algorithm]`: advantages and policy loss."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.checks import check


@dataclass(frozen=True)
class AlgorithmConfig:
    advantage: str = "grpo"
    """Advantage estimator from the registry: grpo, dr_grpo, rloo."""
    advantage_params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the advantage estimator."""
    loss: str = "ppo_clip"
    """Policy loss from the registry: ppo_clip, aepo_clip (AEPO: the upper clip keeps its gradient,
    `workbench/algorithms/entropy_balanced.py`)."""
    clip_low: float = 0.2
    """Lower clip of the probability ratio (1 - clip_low)."""
    clip_high: float = 0.28
    """Upper clip of the ratio (1 + clip_high); above clip_low is DAPO's clip-higher."""
    aggregation: str = "token"
    """"token": mean over every token of the batch (DAPO); "sequence": mean of per-sequence means
    (GRPO); "seq-mean-token-sum-norm": token sum over sequences x max_new_tokens (Dr. GRPO)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the frozen initial policy (0: no reference model is kept)."""
    updates_per_step: int = 1
    """Optimiser steps per training step (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward pass, gradients accumulated (0: the whole mini-batch at once)."""
    entropy_advantage: float = 0.0
    """AEPO's entropy-aware advantage: each token's advantage times 1 + this * z(H_t), z the trainer's token
    entropy standardised over the micro-batch's loss tokens, detached (AEPO: 0.2; 0: off, one advantage per row)."""

    def __post_init__(self) -> None:
        check(0 <= self.clip_low < 1, "algorithm.clip_low", "a number in [0, 1)", self.clip_low)
        check(self.clip_high >= 0, "algorithm.clip_high", "a number >= 0", self.clip_high)
        check(self.kl_coef >= 0, "algorithm.kl_coef", "a number >= 0", self.kl_coef)
        check(self.updates_per_step >= 1, "algorithm.updates_per_step", "an integer >= 1", self.updates_per_step)
        check(0 <= self.entropy_advantage <= 10, "algorithm.entropy_advantage", "a number in [0, 10] (0: off)",
              self.entropy_advantage)
        check(self.micro_batch_size >= 0, "algorithm.micro_batch_size", "an integer >= 0 (0: whole batch)",
              self.micro_batch_size)
