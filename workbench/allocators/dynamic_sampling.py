"""`dynamic_sampling` — DAPO's dynamic sampling: keep only groups whose rewards vary, draw more prompts
until the batch is full.

Paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale"
(arXiv:2503.14476), section 3.2 "Dynamic Sampling".

Rule (departures from uniform GRPO):
1. The sampler draws `ceil(oversample * B)` candidates; each gets a group of `n` in round 1.
2. After each round, groups whose rewards are all equal (all correct or all wrong) are filtered out.
3. While fewer than B groups are kept, fewer than `max_rounds` rounds were run and the budget allows,
   more prompts are drawn mid-step — `ceil(missing / keep_rate)`, the keep rate observed so far this
   step (at least `min_keep_rate`) — and each gets a group of `n`.
4. Only the first B kept groups (in draw order) enter the update; the rounds used are reported
   (`alloc/rounds`), and so are the groups kept (`alloc/kept_groups`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.checks import check_float, check_int
from workbench.allocators.base import Allocator, Grant, GroupResult, StepContext, fit_to_budget, whole_groups
from workbench.allocators.registry import register_allocator


@dataclass(frozen=True)
class DynamicSamplingConfig:
    n: int = 8
    """Rollouts per prompt (group size)."""
    oversample: float = 1.0
    """Candidates drawn for round 1, as a multiple of the batch B (DAPO over-samples, e.g. 3.0)."""
    max_rounds: int = 3
    """Most generation rounds per step, round 1 included (DAPO's max_num_gen_batches)."""
    min_keep_rate: float = 0.125
    """Floor on the observed keep rate when sizing the next draw (avoids huge draws early on)."""

    def __post_init__(self) -> None:
        check_int("dynamic_sampling", "n", self.n, 2, 4096)
        check_float("dynamic_sampling", "oversample", self.oversample, 1.0, 16.0)
        check_int("dynamic_sampling", "max_rounds", self.max_rounds, 1, 100)
        check_float("dynamic_sampling", "min_keep_rate", self.min_keep_rate, 0.0, 1.0, lo_open=True)


@register_allocator("dynamic_sampling")
class DynamicSampling(Allocator):
    Config = DynamicSamplingConfig
    reads_history = False  # this step's results only

    def __init__(self, config=None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self._order: list[str] = []
        self._kept: set[str] | None = None
        """The groups kept this step; None until the step's last next_stage (then every informative one)."""
        self._rounds = 0

    def candidates_wanted(self, prompts_per_step: int) -> int:
        return math.ceil(self.config.oversample * prompts_per_step)

    def begin_step(self, ctx: StepContext) -> list[Grant]:
        grants = whole_groups(ctx, self.config.n, "dapo round 1")
        self._order = [g.prompt_id for g in grants if g.n > 0]
        self._kept = None
        self._rounds = 1 if self._order else 0
        ctx.info.update(rounds=self._rounds, kept_groups=0)
        return grants

    def next_stage(self, ctx: StepContext, results: dict[str, GroupResult]) -> list[Grant]:
        n, batch = self.config.n, ctx.prompts_per_step
        done = [pid for pid in self._order if pid in results]
        kept = [pid for pid in done if results[pid].has_signal]
        missing = batch - len(kept)
        affordable = ctx.budget.rollouts_left() // n
        if missing <= 0 or self._rounds >= self.config.max_rounds or affordable == 0:
            return self._finish(ctx, kept[:batch])
        rate = max(len(kept) / max(len(done), 1), self.config.min_keep_rate)
        new = ctx.draw(min(math.ceil(missing / rate), affordable))
        if not new:
            return self._finish(ctx, kept[:batch])
        self._rounds += 1
        reason = f"dapo round {self._rounds}: {len(kept)}/{batch} groups kept so far"
        grants = [Grant(c.prompt_id, n, reason, c.stats.mean) for c in new]
        grants = fit_to_budget(grants, ctx.budget)
        self._order += [g.prompt_id for g in grants if g.n > 0]
        ctx.info.update(rounds=self._rounds, kept_groups=len(kept))
        return grants

    def _finish(self, ctx: StepContext, kept: list[str]) -> list[Grant]:
        self._kept = set(kept)
        ctx.info.update(rounds=self._rounds, kept_groups=len(kept))
        return []

    def use_in_update(self, group: GroupResult) -> bool:
        return group.has_signal and (self._kept is None or group.prompt_id in self._kept)
