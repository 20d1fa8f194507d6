"""`knapsack` — Knapsack RL: rollouts per prompt chosen by an exact knapsack over the step's budget.

Paper: Li et al. 2025, "Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget Allocation"
(arXiv:2509.25849).

Rule (departures from uniform GRPO):
1. Each prompt is an item whose "weight" is its rollout count N and whose value is
   value(N, p) = (1 - p^N - (1 - p)^N) * p * (1 - p)^2: the probability that a group of N has both
   outcomes (a non-zero gradient) times the information gain p (1 - p)^2 of a prompt at pass rate p.
   p is the prompt's posterior mean pass rate (`PromptStats.mean`).
2. Prompts never seen get `n_unseen` rollouts first (no estimate to optimise).
3. The others get N in [`n_min`, `n_max`], chosen by exact dynamic programming to maximise the summed
   value within the budget left; ties go to the cheaper choice (so budget whose value gain underflows
   is left unspent). When the budget cannot give every prompt `n_min`, as many as fit get `n_min`, the
   most valuable first, and the rest 0.
4. Every group enters the update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from workbench.checks import check_int
from workbench.allocators.base import Allocator, Grant, StepContext, fit_to_budget
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class KnapsackConfig:
    n_min: int = 2
    """Smallest non-zero group for a seen prompt."""
    n_max: int = 128
    """Largest group for one prompt."""
    n_unseen: int = 8
    """Group given to a prompt never seen before."""

    def __post_init__(self) -> None:
        check_int("knapsack", "n_min", self.n_min, 1, 4096)
        check_int("knapsack", "n_max", self.n_max, self.n_min, 4096)
        check_int("knapsack", "n_unseen", self.n_unseen, 1, 4096)


def rollout_value(n: int | np.ndarray, p: float) -> np.ndarray | float:
    """Knapsack RL's value of n rollouts at pass rate p."""
    n = np.asarray(n, dtype=float)
    return (1.0 - p**n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def solve_knapsack(options: Sequence[Sequence[tuple[int, float]]], capacity: int) -> list[int]:
    """Exact multiple-choice knapsack: pick one (cost, value) option per item, total cost <= capacity,
    maximum total value. Returns the chosen option index per item; among equal values the option listed
    first wins. Raises ValueError when no choice fits (give every item a zero-cost option)."""
    capacity = max(0, int(capacity))
    dp = np.zeros(capacity + 1)
    choices = np.zeros((len(options), capacity + 1), dtype=np.int32)
    r = np.arange(capacity + 1)
    for i, opts in enumerate(options):
        costs = np.array([int(c) for c, _ in opts], dtype=np.int64)
        values = np.array([float(v) for _, v in opts])
        prev = r[None, :] - costs[:, None]
        cand = np.where(prev >= 0, dp[np.clip(prev, 0, None)] + values[:, None], -np.inf)
        pick = np.argmax(cand, axis=0)  # the first maximum: the option listed first wins ties
        dp, choices[i] = cand[pick, r], pick
    if len(options) and not np.isfinite(dp[capacity]):
        raise ValueError("no choice of options fits the capacity")
    out, r = [0] * len(options), capacity
    for i in range(len(options) - 1, -1, -1):
        k = int(choices[i][r])
        out[i] = k
        r -= options[i][k][0]
    return out


@register_allocator("knapsack")
class Knapsack(Allocator):
    Config = KnapsackConfig

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        c = self.config
        left = ctx.budget.rollouts_left()
        grants: list[Grant] = []
        seen = []
        for cand in ctx.candidates:
            if cand.stats.seen:
                seen.append(cand)
                continue
            n = c.n_unseen if left >= c.n_unseen else 0
            left -= n
            grants.append(Grant(cand.prompt_id, n, f"knapsack: never seen, default {c.n_unseen}", None))
        grants += self._solve(seen, left)
        ctx.info.update(knapsack_value=sum(
            float(rollout_value(g.n, g.predicted_pass)) for g in grants if g.predicted_pass is not None
        ))
        return fit_to_budget(grants, ctx.budget)

    def _solve(self, seen: list, left: int) -> list[Grant]:
        c = self.config
        ps = [cand.stats.mean for cand in seen]
        if left >= c.n_min * len(seen):
            sizes = np.arange(c.n_min, c.n_max + 1)
            options = [[(int(n), float(v)) for n, v in zip(sizes, rollout_value(sizes, p))] for p in ps]
        else:  # not everyone can have n_min: cover as many as fit, the most valuable first
            bonus = 1.0 + len(seen)  # > any summed value (each value <= 4/27)
            options = [[(0, 0.0), (c.n_min, float(rollout_value(c.n_min, p)) + bonus)] for p in ps]
        picks = solve_knapsack(options, min(left, c.n_max * len(seen)))
        grants = []
        for cand, p, opts, k in zip(seen, ps, options, picks):
            n = opts[k][0]
            why = f"knapsack: p={p:.3f}, value {float(rollout_value(n, p)):.4f}" if n else "knapsack: no budget left"
            grants.append(Grant(cand.prompt_id, n, why, p))
        return grants
