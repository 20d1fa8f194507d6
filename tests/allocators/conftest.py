"""Shared helpers: drive an allocator through the engine's protocol on a synthetic population."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.allocators import Budget, PromptStats, make_allocator
from workbench.allocators.simulate import Sampler, drive_step


def drive(
    name: str,
    *,
    steps: int = 4,
    budget: Budget | None = None,
    population: int = 64,
    batch: int = 8,
    seed: int = 0,
    params: dict | None = None,
    alloc=None,
    stats: dict | None = None,
    start_step: int = 0,
):
    """Run `steps` steps with check=True; returns (allocator, outcomes, stats)."""
    alloc = alloc or make_allocator(name, params or {}, seed=seed)
    stats = {} if stats is None else stats
    ids = [f"p{i:03d}" for i in range(population)]
    pass_rate = {pid: p for pid, p in zip(ids, np.random.default_rng(99).beta(0.5, 0.5, population))}
    sampler = Sampler(ids, stats, np.random.default_rng([seed, 7, start_step]))
    out_rng = np.random.default_rng([seed, 8, start_step])
    budget = budget or Budget("rollouts", 16 * batch)
    outs = []
    for step in range(start_step, start_step + steps):
        sampler.new_step()
        outs.append(
            drive_step(
                alloc, step=step, stats=stats, budget=budget, draw=sampler.draw, prompts_per_step=batch,
                sample=lambda pid, n: (out_rng.random(n) < pass_rate[pid]).astype(float).tolist(),
                seed=seed, has_correct_before=lambda pid: stats[pid].correct > 0, check=True,
            )
        )
    return alloc, outs, stats


@pytest.fixture
def drive_fn():
    return drive


def seen_stats(pid: str, correct: int, n: int, **kw) -> PromptStats:
    s = PromptStats(pid, alpha=1.0 + correct, beta=1.0 + n - correct, visits=1, rollouts=n, correct=correct, last_step=0)
    for k, v in kw.items():
        setattr(s, k, v)
    return s
