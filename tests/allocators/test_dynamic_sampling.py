"""DAPO's dynamic sampling: rounds until B informative groups are kept."""

from __future__ import annotations

from workbench.allocators import Budget, Candidate, PromptStats, make_allocator
from workbench.allocators.simulate import drive_step


def world(pass_rates):
    """A draw function over prompts with fixed pass 0 / 1 / mixed, and a deterministic sampler."""
    ids = list(pass_rates)
    state = {"i": 0}
    stats: dict = {}

    def draw(k):
        out = []
        while len(out) < k and state["i"] < len(ids):
            pid = ids[state["i"]]
            state["i"] += 1
            out.append(Candidate(pid, stats.setdefault(pid, PromptStats(pid))))
        return out

    def sample(pid, n):
        p = pass_rates[pid]
        return [1.0] * n if p == 1 else [0.0] * n if p == 0 else [1.0, 0.0] * (n // 2) + [1.0] * (n % 2)

    return draw, sample, stats


def test_rounds_until_batch_full_and_truncated():
    rates = {f"p{i}": (0.5 if i % 4 == 0 else 1) for i in range(200)}  # a quarter informative
    draw, sample, stats = world(rates)
    alloc = make_allocator("dynamic_sampling", {"n": 4, "max_rounds": 10})
    o = drive_step(alloc, step=0, stats=stats, budget=Budget("rollouts", 10_000), draw=draw,
                   prompts_per_step=8, sample=sample, check=True)
    kept = [pid for pid, used in o.used_in_update.items() if used]
    assert len(kept) == 8
    assert all(rates[pid] == 0.5 for pid in kept)
    assert o.info["rounds"] == 2  # 2 kept of 8 in round 1 -> draws 6 / 0.25 = 24 -> 6 more kept
    assert o.info["kept_groups"] == 8


def test_max_rounds_and_budget_end_the_step():
    rates = {f"p{i}": 0 for i in range(500)}
    draw, sample, stats = world(rates)
    alloc = make_allocator("dynamic_sampling", {"n": 4, "max_rounds": 3})
    o = drive_step(alloc, step=0, stats=stats, budget=Budget("rollouts", 100_000), draw=draw,
                   prompts_per_step=8, sample=sample, check=True)
    assert o.info["rounds"] == 3 and not any(o.used_in_update.values())
    draw, sample, stats = world(rates)
    o = drive_step(make_allocator("dynamic_sampling", {"n": 4, "max_rounds": 50}), step=0, stats=stats,
                   budget=Budget("rollouts", 100), draw=draw, prompts_per_step=8, sample=sample, check=True)
    assert o.rollouts == 100
