"""`value_tracker` — SPO's per-prompt value tracker and its prioritised prompt sampling.

Paper: Xu & Ding 2025, "Single-stream Policy Optimization" (arXiv:2509.13232): a persistent Beta tracker
of each prompt's success probability with forgetting, and a curriculum that samples prompts in
proportion to sqrt(p (1 - p)) + eps.

Rule (departures from uniform GRPO):
1. The allocator keeps its own tracker (alpha, beta) per prompt; a prompt met for the first time starts
   from its shared `PromptStats` posterior. After each step a visited prompt's tracker forgets and
   learns: alpha <- rho * alpha + c, beta <- rho * beta + (n - c) (c correct of n). SPO adapts rho
   from the policy's KL drift; here rho is a fixed parameter.
2. The sampler draws `ceil(pool_factor * B)` candidates; B of them are chosen without replacement with
   probability proportional to w = sqrt(p (1 - p)) + `eps`, p = alpha / (alpha + beta) (Gumbel top-k).
3. Each chosen prompt gets `n` rollouts (SPO itself uses n = 1 with the tracker as the baseline; with a
   group-relative advantage n must be >= 2). Prompts not chosen are logged as grants of 0.
4. Every group enters the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workbench.checks import check_float, check_int
from workbench.allocators.base import Allocator, Grant, GroupResult, StepContext, fit_to_budget
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class ValueTrackerConfig:
    n: int = 8
    """Rollouts per chosen prompt."""
    pool_factor: float = 2.0
    """Candidates drawn per step, as a multiple of the batch B."""
    rho: float = 0.9
    """Forgetting factor of the tracker per visit (1 = never forget)."""
    eps: float = 0.05
    """Floor added to sqrt(p (1 - p)) so that every prompt keeps a chance."""

    def __post_init__(self) -> None:
        check_int("value_tracker", "n", self.n, 1, 4096)
        check_float("value_tracker", "pool_factor", self.pool_factor, 1.0, 64.0)
        check_float("value_tracker", "rho", self.rho, 0.0, 1.0, lo_open=True)
        check_float("value_tracker", "eps", self.eps, 0.0, 1.0, lo_open=True)


def sampling_weight(p: float, eps: float) -> float:
    return math.sqrt(max(p * (1.0 - p), 0.0)) + eps


@register_allocator("value_tracker")
class ValueTracker(Allocator):
    Config = ValueTrackerConfig

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self.tracker: dict[str, list[float]] = {}

    def candidates_wanted(self, prompts_per_step: int) -> int:
        return math.ceil(self.config.pool_factor * prompts_per_step)

    def estimate(self, prompt_id: str, stats) -> float:
        a, b = self.tracker.get(prompt_id, (stats.alpha, stats.beta))
        return a / (a + b)

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        c = self.config
        cands = ctx.candidates
        if not cands:
            return []
        ps = np.array([self.estimate(x.prompt_id, x.stats) for x in cands])
        w = np.array([sampling_weight(p, c.eps) for p in ps])
        slots = min(ctx.prompts_per_step, ctx.budget.rollouts_left() // c.n, len(cands))
        keys = np.log(w) + ctx.rng.gumbel(size=len(cands))
        chosen = set(np.argsort(-keys, kind="stable")[:slots].tolist())
        share = w / w.sum()
        grants = [
            Grant(x.prompt_id, c.n if i in chosen else 0,
                  f"spo: {'drawn' if i in chosen else 'not drawn'}, p={ps[i]:.3f}, weight share {share[i]:.3f}",
                  float(ps[i]))
            for i, x in enumerate(cands)
        ]
        return fit_to_budget(grants, ctx.budget)

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        rho = self.config.rho
        for pid, g in results.items():
            if g.n == 0:
                continue
            stats = ctx.stats.get(pid)
            a, b = self.tracker.get(pid, (stats.alpha, stats.beta) if stats else (1.0, 1.0))
            self.tracker[pid] = [rho * a + g.correct, rho * b + (g.n - g.correct)]
        return []

    def state_dict(self) -> dict:
        return {"tracker": {pid: list(ab) for pid, ab in self.tracker.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.tracker = {pid: [float(a), float(b)] for pid, (a, b) in state["tracker"].items()}
