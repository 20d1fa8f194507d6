"""`rank_proportional` — E3's difficulty-aware budget: more rollouts for harder prompts, by rank.

Paper: Liao et al. 2025, "Enhancing Efficiency and Exploration in Reinforcement Learning for LLMs"
(arXiv:2505.18573). Its second half, the entropy-targeting temperature controller, lives in
`workbench/allocators/temperature.py` and combines with any allocator.

Rule (departures from uniform GRPO):
1. The step's candidates are ranked by difficulty, 1 - (posterior mean pass rate); ties keep the
   sampler's order. With r = 0 for the easiest and P - 1 for the hardest of P candidates, a prompt gets
   n = round(lo + (hi - lo) * r / (P - 1)) rollouts (a single candidate gets round((lo + hi) / 2)).
2. The bounds widen each epoch: at epoch e = step // `steps_per_epoch`,
   lo = max(`n_floor`, `n_min` - e * `widen`) and hi = min(`n_ceil`, `n_max` + e * `widen`).
3. When the total exceeds the budget left, every n is scaled down in proportion (floor) and leftover
   rollouts go to the hardest prompts first.
4. One stage; every group enters the update.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.checks import check_int
from workbench.allocators.base import Allocator, Grant, StepContext, fit_to_budget
from workbench.allocators.multistage import scale_to_budget
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class RankProportionalConfig:
    n_min: int = 4
    """Rollouts for the easiest candidate at epoch 0."""
    n_max: int = 12
    """Rollouts for the hardest candidate at epoch 0."""
    widen: int = 2
    """How far each bound moves outward per epoch."""
    n_floor: int = 2
    """The lower bound never goes below this."""
    n_ceil: int = 32
    """The upper bound never goes above this."""
    steps_per_epoch: int = 50
    """Steps per epoch (the allocator sees steps, not the data set)."""

    def __post_init__(self) -> None:
        o = "rank_proportional"
        check_int(o, "n_floor", self.n_floor, 1, 4096)
        check_int(o, "n_min", self.n_min, self.n_floor, 4096)
        check_int(o, "n_max", self.n_max, self.n_min, 65536)
        check_int(o, "n_ceil", self.n_ceil, self.n_max, 65536)
        check_int(o, "widen", self.widen, 0, 4096)
        check_int(o, "steps_per_epoch", self.steps_per_epoch, 1)


def rank_allocation(difficulty: list[float], lo: int, hi: int) -> list[int]:
    """n per prompt, linear in its difficulty rank between lo and hi (stable ranks)."""
    p = len(difficulty)
    if p == 0:
        return []
    if p == 1:
        return [int(round((lo + hi) / 2))]
    order = sorted(range(p), key=lambda i: difficulty[i])
    out = [0] * p
    for rank, i in enumerate(order):
        out[i] = int(round(lo + (hi - lo) * rank / (p - 1)))
    return out


@register_allocator("rank_proportional")
class RankProportional(Allocator):
    Config = RankProportionalConfig

    def bounds(self, step: int) -> tuple[int, int]:
        c = self.config
        e = max(step, 0) // c.steps_per_epoch
        return max(c.n_floor, c.n_min - e * c.widen), min(c.n_ceil, c.n_max + e * c.widen)

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        lo, hi = self.bounds(ctx.step)
        diff = [1.0 - c.stats.mean for c in ctx.candidates]
        ids = [c.prompt_id for c in ctx.candidates]
        wants = dict(zip(ids, rank_allocation(diff, lo, hi)))
        got = scale_to_budget(wants, ctx.budget.rollouts_left(), {pid: 1.0 - d for pid, d in zip(ids, diff)})
        grants = [
            Grant(pid, got[pid], f"e3 rank: difficulty {d:.3f}, bounds [{lo}, {hi}], wants {wants[pid]}", 1.0 - d)
            for pid, d in zip(ids, diff)
        ]
        ctx.info.update(n_lo=lo, n_hi=hi)
        return fit_to_budget(grants, ctx.budget)
