"""Property tests (hypothesis): random per-prompt statistics, budgets and outcomes, every allocator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.allocators import Budget, Candidate, PromptStats, make_allocator
from workbench.allocators._stats import beta_cdf, t_cdf, t_quantile
from workbench.allocators.base import Grant, fit_to_budget
from workbench.allocators.registry import shipped_allocators
from workbench.allocators.knapsack import solve_knapsack
from workbench.allocators.simulate import drive_step

stats_st = st.builds(
    lambda pid, a, b, visits, easy, hard, tokens: PromptStats(
        pid, alpha=a, beta=b, visits=visits, rollouts=visits * 8, correct=int((a - 1) if visits else 0),
        easy_streak=easy if visits else 0, hard_streak=0 if easy or not visits else hard,
        last_step=0 if visits else -1, mean_tokens=tokens,
    ),
    st.just(""),
    st.floats(1.0, 200.0), st.floats(1.0, 200.0), st.integers(0, 20), st.integers(0, 6), st.integers(0, 6),
    st.one_of(st.none(), st.floats(1.0, 500.0)),
)
budget_st = st.one_of(
    st.builds(lambda a: Budget("rollouts", a), st.integers(0, 600)),
    st.builds(lambda a, t: Budget("tokens", a, tokens_per_rollout=t), st.integers(0, 20_000), st.floats(1.0, 400.0)),
)


@pytest.mark.parametrize("name", shipped_allocators())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pool=st.lists(stats_st, min_size=0, max_size=40),
    batch=st.integers(0, 16),
    budget=budget_st,
    pass_rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_one_step_keeps_the_contract(name, pool, batch, budget, pass_rates, seed):
    stats = {}
    for i, s in enumerate(pool):
        s.prompt_id = f"r{i}"
        stats[s.prompt_id] = s
    queue = list(stats.values())

    def draw(k):
        out = [Candidate(s.prompt_id, s) for s in queue[:k]]
        del queue[:k]
        return out

    rng = np.random.default_rng(seed)
    rate = {pid: pass_rates[i % len(pass_rates)] for i, pid in enumerate(stats)}
    alloc = make_allocator(name, {}, seed=seed)
    o = drive_step(alloc, step=int(rng.integers(0, 500)), stats=stats, budget=budget, draw=draw,
                   prompts_per_step=batch, sample=lambda pid, n: (rng.random(n) < rate[pid]).astype(float).tolist(),
                   seed=seed, check=True)
    assert o.rollouts <= budget.rollouts_left()
    assert all(g.n >= 0 for _, g in o.grants)


@given(grants=st.lists(st.integers(-3, 50), max_size=20), left=st.integers(0, 200))
def test_fit_to_budget(grants, left):
    out = fit_to_budget([Grant(f"g{i}", n, "r") for i, n in enumerate(grants)], Budget("rollouts", left))
    assert sum(g.n for g in out) <= left and all(g.n >= 0 for g in out)
    assert [g.prompt_id for g in out] == [f"g{i}" for i in range(len(grants))]
    if sum(max(n, 0) for n in grants) <= left:
        assert [g.n for g in out] == [max(n, 0) for n in grants]


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), min_size=1, max_size=6),
    cap=st.integers(0, 40),
)
def test_knapsack_dp_is_feasible_and_beats_any_single_choice(values, cap):
    options = [[(0, 0.0)] + [(k + 1, v) for k, v in enumerate(vs)] for vs in values]
    picks = solve_knapsack(options, cap)
    cost = sum(options[i][k][0] for i, k in enumerate(picks))
    value = sum(options[i][k][1] for i, k in enumerate(picks))
    assert cost <= cap
    # never worse than any single-item improvement over the all-zero choice
    for i, opts in enumerate(options):
        for c, v in opts:
            if c <= cap:
                assert value >= v - 1e-12


@settings(max_examples=60, deadline=None)
@given(a=st.floats(1.0, 50), b=st.floats(1.0, 50), x=st.floats(0.0, 1.0))
def test_beta_cdf_matches_numeric_integration(a, b, x):
    grid = np.linspace(0.0, 1.0, 100_001)
    mid = (grid[:-1] + grid[1:]) / 2  # midpoint rule: the density is never evaluated at 0 or 1
    logpdf = (a - 1) * np.log(mid) + (b - 1) * np.log1p(-mid)
    cdf = np.concatenate([[0.0], np.cumsum(np.exp(logpdf - logpdf.max()))])
    expected = np.interp(x, grid, cdf / cdf[-1])
    assert beta_cdf(x, a, b) == pytest.approx(expected, abs=1e-3)


@given(q=st.floats(0.55, 0.995), df=st.floats(1.0, 200.0))
def test_t_quantile_inverts_cdf(q, df):
    assert abs(t_cdf(t_quantile(q, df), df) - q) < 1e-9

