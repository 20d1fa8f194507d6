"""`[optim]`: optimiser and learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.checks import check


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate (peak, after warm-up)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment coefficients."""
    eps: float = 1e-8
    """AdamW epsilon."""
    warmup_steps: int = 10
    """Linear warm-up of the learning rate over this many optimiser steps."""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after warm-up."""
    min_lr_ratio: float = 0.1
    """Final learning rate as a share of `lr` for the cosine and linear schedules."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0: no clipping)."""

    def __post_init__(self) -> None:
        check(self.lr > 0, "optim.lr", "a number > 0", self.lr)
        check(self.weight_decay >= 0, "optim.weight_decay", "a number >= 0", self.weight_decay)
        check(all(0 <= b < 1 for b in self.betas), "optim.betas", "two numbers in [0, 1)", list(self.betas))
        check(self.eps > 0, "optim.eps", "a number > 0", self.eps)
        check(self.warmup_steps >= 0, "optim.warmup_steps", "an integer >= 0", self.warmup_steps)
        check(0 <= self.min_lr_ratio <= 1, "optim.min_lr_ratio", "a share in [0, 1]", self.min_lr_ratio)
        check(self.grad_clip >= 0, "optim.grad_clip", "a number >= 0 (0: off)", self.grad_clip)
