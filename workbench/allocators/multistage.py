"""`multistage` — DARS: a second stage of rollouts for the prompts the first stage found hard.

Paper: Yang et al. 2025, "Depth-Breadth Synergy in RLVR: Unlocking LLM Reasoning Gains with Adaptive
Exploration" (arXiv:2508.13755), Difficulty Adaptive Rollout Sampling (DARS).

Rule (departures from uniform GRPO):
1. Stage 1 gives every candidate N = `n` rollouts.
2. A prompt whose stage-1 accuracy a is below `threshold` (0.5) gets dn more in stage 2, with
   a' = a, or a' = 0.5 / N when a = 0:
   - equal-treatment (`schedule="equal"`): dn = ceil(N / (4 a' (1 - a')) - N), which brings the
     prompt's total |advantage| mass up to that of a prompt at a = 0.5;
   - hardness-weighted (`schedule="hardness"`): dn = ceil(N (1 - 2a') / (2a')).
   dn is capped at `n_max` - N. When the budget left cannot pay for every dn, each is scaled down in
   proportion (floor), and leftover rollouts go to the hardest prompts first.
3. Groups are pooled over both stages; a pooled group with accuracy 0 or 1 is dropped from the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from workbench.checks import check_choice, check_float, check_int
from workbench.allocators.base import Allocator, Grant, GroupResult, StepContext, fit_to_budget, whole_groups
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class MultistageConfig:
    n: int = 8
    """Stage-1 rollouts per prompt (N)."""
    n_max: int = 32
    """Most rollouts a prompt gets over both stages (N_max)."""
    schedule: Literal["equal", "hardness"] = "equal"
    """Stage-2 schedule: equal-treatment or hardness-weighted."""
    threshold: float = 0.5
    """Prompts with stage-1 accuracy below this get a stage 2."""

    def __post_init__(self) -> None:
        check_int("multistage", "n", self.n, 1, 4096)
        check_int("multistage", "n_max", self.n_max, self.n, 65536)
        check_choice("multistage", "schedule", self.schedule, ("equal", "hardness"))
        check_float("multistage", "threshold", self.threshold, 0.0, 1.0)


def extra_rollouts(correct: int, n: int, n_max: int, schedule: str, threshold: float = 0.5) -> int:
    """DARS stage-2 rollouts for a prompt with `correct` of `n` right in stage 1."""
    a = correct / n
    if a >= threshold:
        return 0
    a_eff = a if a > 0 else 0.5 / n
    if schedule == "equal":
        dn = n / (4.0 * a_eff * (1.0 - a_eff)) - n
    else:
        dn = n * (1.0 - 2.0 * a_eff) / (2.0 * a_eff)
    return max(0, min(math.ceil(dn - 1e-9), n_max - n))


def scale_to_budget(wants: dict[str, int], left: int, hardness: dict[str, float]) -> dict[str, int]:
    """Scale `wants` down in proportion to fit `left` (floor), leftovers to the hardest first."""
    total = sum(wants.values())
    if total <= left:
        return dict(wants)
    out = {pid: (w * left) // total for pid, w in wants.items()}
    spare = left - sum(out.values())
    for pid in sorted(wants, key=lambda p: (hardness[p], p)):
        if spare == 0:
            break
        if out[pid] < wants[pid]:
            out[pid] += 1
            spare -= 1
    return out


@register_allocator("multistage")
class Multistage(Allocator):
    Config = MultistageConfig
    reads_history = False  # this step's results only

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self._stage = 0

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        self._stage = 1
        return whole_groups(ctx, self.config.n, "dars stage 1")

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        if self._stage != 1:
            return []
        self._stage = 2
        c = self.config
        wants, acc = {}, {}
        for pid, g in results.items():
            if g.n == 0:
                continue
            acc[pid] = g.correct / g.n
            dn = extra_rollouts(g.correct, g.n, max(c.n_max, g.n), c.schedule, c.threshold)
            if dn > 0:
                wants[pid] = dn
        got = scale_to_budget(wants, ctx.budget.rollouts_left(), acc)
        grants = [
            Grant(pid, got[pid], f"dars stage 2 ({c.schedule}): stage-1 accuracy {acc[pid]:.3f}, "
                  f"wants +{wants[pid]}", acc[pid])
            for pid in wants
            if got[pid] > 0
        ]
        ctx.info.update(stage2_prompts=len(grants), stage2_rollouts=sum(g.n for g in grants))
        return fit_to_budget(grants, ctx.budget)

    def use_in_update(self, group: GroupResult) -> bool:
        return 0 < group.correct < group.n
