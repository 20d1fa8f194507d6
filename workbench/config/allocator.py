"""`[allocator]`: how the budget is spread over prompts (each allocator's own parameters live beside its
code in `workbench/allocators/`; this section names one and passes `params` through)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.checks import check


@dataclass(frozen=True)
class AllocatorConfig:
    name: str = "uniform"
    """Allocator from the registry (`workbench allocators list`)."""
    params: dict[str, Any] = field(default_factory=dict)
    """The allocator's own parameters, validated by its config dataclass."""
    budget_kind: Literal["rollouts", "tokens"] = "rollouts"
    """What the per-step budget counts: rollouts, or generated tokens."""
    budget: int = 512
    """Rollouts (or generated tokens) per training step."""
    prompts_per_step: int = 64
    """Candidate prompts the sampler draws per step (B); an allocator may ask for more."""
    max_stages: int = 8
    """Engine limit on allocation stages within one step."""
    stats_decay: float = 1.0
    """Per-visit decay of the per-prompt Beta posterior (1: never forget)."""

    def __post_init__(self) -> None:
        check(self.budget >= 1, "allocator.budget", "an integer >= 1", self.budget)
        check(self.prompts_per_step >= 1, "allocator.prompts_per_step", "an integer >= 1", self.prompts_per_step)
        check(self.max_stages >= 1, "allocator.max_stages", "an integer >= 1", self.max_stages)
        check(0 < self.stats_decay <= 1, "allocator.stats_decay", "a number in (0, 1]", self.stats_decay)
