"""`uniform` — GRPO's allocation: n rollouts for each of the B prompts the sampler drew.

Paper: Shao et al. 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models" (arXiv:2402.03300), which introduced GRPO with a fixed group of G outputs per question.

Rule (the baseline every other allocator departs from):
1. Every candidate prompt gets exactly `n` rollouts in one stage.
2. When the budget cannot pay for every group, whole groups are granted to the candidates in sampler
   order until it runs out; the rest get 0 (logged as "budget exhausted").
3. Every group enters the update (zero-variance groups carry no gradient, but they are kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check_int
from workbench.allocators.base import Allocator, Grant, StepContext, whole_groups
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class UniformConfig:
    n: int = 8
    """Rollouts per prompt (GRPO's group size G)."""

    def __post_init__(self) -> None:
        check_int("uniform", "n", self.n, 1, 4096)


@register_allocator("uniform")
class Uniform(Allocator):
    Config = UniformConfig
    reads_history = False  # this step's results only

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        return whole_groups(ctx, self.config.n, "uniform")

