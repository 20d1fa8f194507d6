"""`uncertainty` — XRPO-style: phased top-ups to the prompts whose mean reward is least certain.

Paper: Bamba et al. 2025, "XRPO: Pushing the limits of GRPO with Targeted Exploration and
Exploitation" (arXiv:2510.06672), the hierarchical rollout planner. Only its allocator is taken here
(not its in-context seeding or advantage sharpening).

Rule (departures from uniform GRPO):
1. Phase 0 gives every candidate `n0` rollouts.
2. The budget left is then spent over `phases` more phases; phase j (1-based) may spend
   floor(left_now / (phases - j + 1)). Within a phase, rollouts go `k` at a time to the prompt of
   highest priority, recomputed after every pick, until the phase's share is spent or no prompt can
   take more (at most `n_max` rollouts per prompt).
3. The priority of a prompt with n rollouts, c of them correct, when N rollouts were drawn this step:
       priority = h(n) - h(n + k) + lam * sqrt(ln(1 + N) / (n + 1)),
       h(m) = t_{(1 + confidence)/2, m - 1} * s / sqrt(m),   s^2 = p~ (1 - p~),   p~ = (c + 1) / (n + 2),
   h being the half-width of the Student-t confidence interval of the mean reward (degrees of freedom
   at least 1). XRPO uses the sample standard deviation; the Laplace-smoothed p~ used here keeps an
   all-correct or all-wrong group from looking certain after a handful of samples. The second term is
   XRPO's exploration bonus (UCB-style).
4. Every group enters the update.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from workbench.checks import check_float, check_int
from workbench.allocators._stats import t_quantile
from workbench.allocators.base import Allocator, Grant, GroupResult, StepContext, fit_to_budget, whole_groups
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class UncertaintyConfig:
    n0: int = 4
    """Phase-0 rollouts per prompt."""
    phases: int = 2
    """Top-up phases after phase 0."""
    k: int = 2
    """Rollouts per pick within a phase."""
    n_max: int = 32
    """Most rollouts a prompt gets in one step."""
    lam: float = 0.1
    """Weight of the exploration bonus."""
    confidence: float = 0.95
    """Confidence level of the interval whose half-width is shrunk."""

    def __post_init__(self) -> None:
        o = "uncertainty"
        check_int(o, "n0", self.n0, 1, 4096)
        check_int(o, "phases", self.phases, 0, 100)
        check_int(o, "k", self.k, 1, 4096)
        check_int(o, "n_max", self.n_max, self.n0, 65536)
        check_float(o, "lam", self.lam, 0.0, 100.0)
        check_float(o, "confidence", self.confidence, 0.5, 1.0, lo_open=True, hi_open=True)


def half_width(n: int, correct: int, confidence: float) -> float:
    """h(n): half-width of the t confidence interval of the mean reward (smoothed std)."""
    if n <= 0:
        return float("inf")
    p = (correct + 1.0) / (n + 2.0)
    t = t_quantile((1.0 + confidence) / 2.0, float(max(n - 1, 1)))
    return t * math.sqrt(p * (1.0 - p)) / math.sqrt(n)


def priority(n: int, correct: int, total: int, cfg: UncertaintyConfig) -> float:
    """Expected shrink of h from k more rollouts, plus the exploration bonus."""
    shrink = half_width(n, correct, cfg.confidence) - half_width(n + cfg.k, correct, cfg.confidence)
    return shrink + cfg.lam * math.sqrt(math.log(1.0 + total) / (n + 1.0))


@register_allocator("uncertainty")
class Uncertainty(Allocator):
    Config = UncertaintyConfig
    reads_history = False  # this step's results only

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self._phase = 0
        self._order: list[str] = []

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        grants = whole_groups(ctx, self.config.n0, "xrpo phase 0")
        self._order = [g.prompt_id for g in grants if g.n > 0]
        self._phase = 0
        return grants

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        c = self.config
        self._phase += 1
        if self._phase > c.phases:
            return []
        share = ctx.budget.rollouts_left() // (c.phases - self._phase + 1)
        counts = {pid: [results[pid].n, results[pid].correct] for pid in self._order if pid in results}
        total = sum(n for n, _ in counts.values())
        heap = [(-priority(n, k, total, c), i, pid) for i, (pid, (n, k)) in enumerate(counts.items())]
        heapq.heapify(heap)
        extra: dict[str, int] = {}
        first: dict[str, float] = {}
        while heap and share > 0:
            neg, i, pid = heapq.heappop(heap)
            n, k = counts[pid]
            take = min(c.k, c.n_max - n, share)
            if take <= 0:
                continue
            first.setdefault(pid, -neg)
            extra[pid] = extra.get(pid, 0) + take
            counts[pid][0] += take
            share -= take
            total += take
            heapq.heappush(heap, (-priority(counts[pid][0], k, total, c), i, pid))
        grants = [
            Grant(pid, extra[pid], f"xrpo phase {self._phase}: priority {first[pid]:.4f}, "
                  f"{results[pid].correct}/{results[pid].n} correct so far", (results[pid].correct + 1) / (results[pid].n + 2))
            for pid in self._order
            if pid in extra
        ]
        ctx.info.update(phases=self._phase)
        return fit_to_budget(grants, ctx.budget)
